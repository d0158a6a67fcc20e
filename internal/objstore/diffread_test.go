package objstore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/host/internal/objstore"
	"github.com/agenthost/host/internal/voldiff"
)

// versions commits two versions of volume name and returns the second's manifest sha256.
func twoVersions(t *testing.T, v *objstore.Volumes, name string) string {
	t.Helper()
	mountEdit(t, v, name, "job-1", func(d string) {
		writeTree(t, d, map[string]node{
			"README.md": file(0o644, "# repo\nold line\nend\n"),
			"gone.txt":  file(0o644, "bye\n"),
			"run.sh":    file(0o644, "#!/bin/sh\n"),
			"logo.bin":  file(0o644, "\x89PNG\x00\x01"),
			"cur":       link("v1"),
		})
	})
	mountEdit(t, v, name, "job-2", func(d string) {
		if err := os.Remove(filepath.Join(d, "gone.txt")); err != nil {
			t.Fatal(err)
		}
		writeTree(t, d, map[string]node{
			"README.md":   file(0o644, "# repo\nnew line\nend\n"),
			"run.sh":      file(0o755, "#!/bin/sh\n"),
			"logo.bin":    file(0o644, "\x89PNG\x00\x02\x03"),
			"cur":         link("v2"),
			"page.html":   file(0o644, "<script>alert(1)</script>\n"),
			"docs/fix.md": file(0o644, "the fix\n"),
		})
	})
	h, err := v.History(context.Background(), name)
	if err != nil || len(h) != 2 || h[1].Manifest == "" {
		t.Fatalf("history %+v %v", h, err)
	}
	return h[1].Manifest
}

func TestDiffVersions(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		v := e.volumes(t)
		manifest := twoVersions(t, v, "repo")
		// Another host, with a cache of its own (empty): it reads from the store.
		d, err := e.volumes(t).DiffVersions(ctx, "repo", 1, 2, manifest, voldiff.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		if err := d.WriteText(&out, ""); err != nil {
			t.Fatal(err)
		}
		want := `3 added, 1 removed, 4 changed
changed  README.md  (20 B → 20 B)
    --- a/README.md
    +++ b/README.md
    @@ -1,3 +1,3 @@
     # repo
    -old line
    +new line
     end
changed  cur  (target v1 → v2)
added    docs  (directory, mode 0755)
added    docs/fix.md  (8 B sha256:` + sha("the fix\n")[:12] + `, mode 0644)
    --- /dev/null
    +++ b/docs/fix.md
    @@ -0,0 +1 @@
    +the fix
removed  gone.txt  (4 B sha256:` + sha("bye\n")[:12] + `, mode 0644)
    --- a/gone.txt
    +++ /dev/null
    @@ -1 +0,0 @@
    -bye
changed  logo.bin  (binary, 6 B sha256:` + sha("\x89PNG\x00\x01")[:12] + ` → 7 B sha256:` + sha("\x89PNG\x00\x02\x03")[:12] + `)
added    page.html  (26 B sha256:` + sha("<script>alert(1)</script>\n")[:12] + `, mode 0644)
    --- /dev/null
    +++ b/page.html
    @@ -0,0 +1 @@
    +<script>alert(1)</script>
changed  run.sh  (mode 0644 → 0755)
`
		if out.String() != want {
			t.Fatalf("diff:\n%s\nwant:\n%s", out.String(), want)
		}
		// Base 0: everything is added.
		d0, err := v.DiffVersions(ctx, "repo", 0, 2, manifest, voldiff.Options{})
		if err != nil || d0.Added != 7 || d0.Removed+d0.Changed != 0 {
			t.Fatalf("against the empty volume: %+v %v", d0, err)
		}
		// A manifest that is not there (a discarded staged version) says so.
		_, err = v.DiffVersions(ctx, "repo", 1, 3, sha("never stored"), voldiff.Options{})
		if !errors.Is(err, objstore.ErrVersionGone) || !strings.Contains(err.Error(), "version 3 of volume repo") {
			t.Fatalf("a missing manifest: %v", err)
		}
		if _, err = v.DiffVersions(ctx, "repo", 9, 2, manifest, voldiff.Options{}); !errors.Is(err, objstore.ErrNotFound) || !strings.Contains(err.Error(), "no longer kept") {
			t.Fatalf("a base that is not kept: %v", err)
		}
		if _, err = v.DiffVersions(ctx, "repo", 1, 2, "not-a-hash", voldiff.Options{}); err == nil {
			t.Fatal("a manifest that is not a sha256 was taken")
		}
	})
}

// A 100 MiB binary file in a version is compared from the manifests alone: it is never
// downloaded.
func TestDiffVersionsHugeFile(t *testing.T) {
	e := newEnv(t, "jetstream")
	ctx := context.Background()
	v := e.volumes(t, func(o *objstore.Options) { o.MaxBytes = 200 << 20 })
	big := make([]byte, 100<<20)
	big[0] = 1
	mountEdit(t, v, "data", "job-1", func(d string) {
		if err := os.WriteFile(filepath.Join(d, "model.bin"), big, 0o644); err != nil {
			t.Fatal(err)
		}
	})
	big[1] = 2
	mountEdit(t, v, "data", "job-2", func(d string) {
		if err := os.WriteFile(filepath.Join(d, "model.bin"), big, 0o644); err != nil {
			t.Fatal(err)
		}
	})
	h, err := v.History(ctx, "data")
	if err != nil {
		t.Fatal(err)
	}
	fresh := e.volumes(t) // an empty cache: reading the file would download it
	start := time.Now()
	d, err := fresh.DiffVersions(ctx, "data", 1, 2, h[1].Manifest, voldiff.Options{})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	fd := d.Files[0]
	if len(d.Files) != 1 || fd.Text != "" || !strings.Contains(fd.Why, "over 1 MiB") || !strings.HasPrefix(fd.Summary(), "100 MiB sha256:") {
		t.Fatalf("the huge file: %+v %q", d.Files, fd.Summary())
	}
	t.Logf("diffed two versions of a 100 MiB file in %v", took)
}
