package objstore_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agenthost/host/internal/objstore"
)

// mountIn mounts a volume into dir and returns the mount; the caller commits or releases.
func mountIn(t *testing.T, v *objstore.Volumes, name, dir string) *objstore.Mounted {
	t.Helper()
	m, err := v.Mount(context.Background(), name, dir, "job-"+filepath.Base(dir))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A rerun on the same host gets the last committed copy back without copying it, and a run
// that failed never leaves its changes for the next one.
func TestWarmCheckouts(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		v := e.volumes(t)
		jobs := t.TempDir()
		tree := map[string]node{"notes": dir(0o755), "notes/a.txt": file(0o644, "alpha"), "b.bin": file(0o600, "bravo"), "ln": link("notes/a.txt")}

		m := mountIn(t, v, "warm", filepath.Join(jobs, "1"))
		writeTree(t, filepath.Join(jobs, "1"), tree)
		if _, err := m.Commit(ctx, "1"); err != nil {
			t.Fatal(err)
		}
		m.Release(ctx)

		m = mountIn(t, v, "warm", filepath.Join(jobs, "2"))
		if in := m.In(); !in.Warm || in.FilesFetched != 0 || in.Files != 4 {
			t.Fatalf("second mount: %+v, want a warm checkout", in)
		}
		diffTrees(t, tree, readTree(t, filepath.Join(jobs, "2")))
		// This run fails: it changes a file and never commits.
		os.WriteFile(filepath.Join(jobs, "2", "b.bin"), []byte("broken"), 0o600)
		m.Release(ctx)

		m = mountIn(t, v, "warm", filepath.Join(jobs, "3"))
		if m.In().Warm {
			t.Fatal("a failed run's copy was reused")
		}
		diffTrees(t, tree, readTree(t, filepath.Join(jobs, "3")))
		res, err := m.Commit(ctx, "3") // nothing changed: still kept warm
		if err != nil || res.Changed {
			t.Fatalf("unchanged commit: %+v %v", res, err)
		}
		m.Release(ctx)

		// Another host moves the volume on: this host's warm copy is out of date and dropped.
		other := e.volumes(t)
		mountEdit(t, other, "warm", "other", func(d string) {
			os.WriteFile(filepath.Join(d, "notes", "a.txt"), []byte("ALPHA"), 0o644)
		})
		m = mountIn(t, v, "warm", filepath.Join(jobs, "4"))
		if m.In().Warm {
			t.Fatal("a warm copy of an old version was used")
		}
		if got, _ := os.ReadFile(filepath.Join(jobs, "4", "notes", "a.txt")); string(got) != "ALPHA" {
			t.Fatalf("content after another host's commit: %q", got)
		}
		if _, err := m.Commit(ctx, "4"); err != nil {
			t.Fatal(err)
		}
		m.Release(ctx)

		// A warm copy changed behind the host's back is not trusted.
		tampered := 0
		filepath.WalkDir(filepath.Dir(t.TempDir()), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() && filepath.Base(filepath.Dir(p)) == "checkouts" && filepath.Base(p) == "warm" {
				os.WriteFile(filepath.Join(p, "b.bin"), []byte("bravx"), 0o600)
				tampered++
			}
			return nil
		})
		if tampered == 0 {
			t.Fatal("no warm copy found to tamper with")
		}
		m = mountIn(t, v, "warm", filepath.Join(jobs, "5"))
		if m.In().Warm {
			t.Fatal("a tampered warm copy was used")
		}
		if got, _ := os.ReadFile(filepath.Join(jobs, "5", "b.bin")); string(got) != "bravo" {
			t.Fatalf("content after tampering: %q", got)
		}
		m.Release(ctx)
	})
}

// An edit that keeps the size and puts the old modification time back is still committed:
// the change time gives it away, even when the file's stamp would otherwise be trusted.
func TestStampsCatchSameSizeEdits(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		v := e.volumes(t)
		jobs := t.TempDir()
		m := mountIn(t, v, "stamps", filepath.Join(jobs, "1"))
		writeTree(t, filepath.Join(jobs, "1"), map[string]node{"state.json": file(0o644, `{"n":1}`)})
		m.Commit(ctx, "1")
		m.Release(ctx)

		m = mountIn(t, v, "stamps", filepath.Join(jobs, "2"))
		p := filepath.Join(jobs, "2", "state.json")
		info, _ := os.Stat(p)
		// Outside the racy window, so the stamp alone would vouch for an untouched file.
		time.Sleep(60 * time.Millisecond)
		os.WriteFile(p, []byte(`{"n":2}`), 0o644)
		os.Chtimes(p, info.ModTime(), info.ModTime())
		res, err := m.Commit(ctx, "2")
		if err != nil || !res.Changed || res.Stats.FilesUploaded != 1 {
			t.Fatalf("same-size edit with the old mtime: %+v %v", res, err)
		}
		m.Release(ctx)
		got, _ := checkout(t, v, "stamps")
		if got["state.json"].content != `{"n":2}` {
			t.Fatalf("stored %q", got["state.json"].content)
		}
	})
}
