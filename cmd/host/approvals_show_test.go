package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/objstore"
	"github.com/agenthost/host/internal/review"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/testkit/s3test"
)

// stagedFunctions are a step that makes version 1 of volume repo and one that changes it and
// waits for approval (version 2).
var stagedFunctions = map[string]string{
	"seed.sh": "# sandbox\n# volume: repo repo\n" +
		"printf '# repo\\nold line\\nend\\n' > repo/README.md\nprintf 'bye\\n' > repo/gone.txt\n" +
		"printf '#!/bin/sh\\n' > repo/run.sh\nprintf '\\211PNG\\000\\001' > repo/logo.bin\necho '\"seeded\"'\n",
	"edit.sh": "# sandbox\n# volume: repo repo\n# approve: timeout 1h by ops\n" +
		"rm repo/gone.txt\nprintf '# repo\\nnew line\\nend\\n' > repo/README.md\nchmod 755 repo/run.sh\n" +
		"printf '\\211PNG\\000\\002\\003' > repo/logo.bin\nprintf '<script>alert(1)</script>\\n' > repo/page.html\n" +
		"mkdir -p repo/docs && printf 'the fix\\n' > repo/docs/fix.md\necho '{\"proposed\":\"fix\"}'\n",
}

// wantStagedDiff is what `host approvals show` prints of the edit step's volume.
func wantStagedDiff(manifest string) string {
	return `volume repo: version 1 → staged version 2 (71 B in all, manifest ` + manifest[:12] + `)
  3 added, 1 removed, 3 changed
  changed  README.md  (20 B → 20 B)
      --- a/README.md
      +++ b/README.md
      @@ -1,3 +1,3 @@
       # repo
      -old line
      +new line
       end
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
}

// stageEdit runs seed, then edit, which waits; and makes edit's record say what a staged step's
// says (approve: ... stage): its volume's version 2 is staged on version 1. Until the staging
// itself lands (issue 44, item 1), version 2 is an ordinary committed version, whose manifest
// is stored at the key a staged one's is.
func stageEdit(t *testing.T, h *hosttest.H, s3 *objstore.S3Config, home string) (id, manifest string) {
	t.Helper()
	ctx := context.Background()
	if m := h.Call("seed", "{}"); string(m.Data) != `"seeded"` {
		t.Fatalf("seed: %s", m.Data)
	}
	out, errOut, code := runNoKey(t, home, "--nats", h.Srv.ClientURL(), "invoke", "edit")
	if code != 0 {
		t.Fatalf("invoke edit: exit %d: %s", code, errOut)
	}
	id = strings.TrimSpace(out)
	h.Eventually("job "+id+" waits", func() bool {
		rec, err := h.Store.Get(ctx, id)
		return err == nil && rec.Status == jobtype.Waiting
	})
	js, _ := jetstream.New(h.NC)
	v, err := objstore.Open(ctx, js, s3, objstore.Options{Log: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	hist, err := v.History(ctx, "repo")
	if err != nil || len(hist) != 2 {
		t.Fatalf("history of repo: %+v %v", hist, err)
	}
	rec, at, err := h.Store.GetRev(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	rec.Approval.Stage = true
	rec.Approval.Staged = []jobs.StagedVolume{{Volume: "repo", Base: 1, Version: 2, Manifest: hist[1].Manifest,
		Added: []string{"docs", "docs/fix.md", "page.html"}, Removed: []string{"gone.txt"}, Changed: []string{"README.md", "logo.bin", "run.sh"},
		NAdded: 3, NRemoved: 1, NChanged: 3, Bytes: hist[1].TotalBytes}}
	if _, err := h.Store.Amend(ctx, rec, at); err != nil {
		t.Fatal(err)
	}
	return id, hist[1].Manifest
}

// `host approvals show` asks a real host, which reads the real volume store it serves with
// (the JetStream Object Store, or versitygw's S3), and prints the exact diff.
func TestApprovalsShow(t *testing.T) {
	for _, store := range []string{"jetstream", "s3"} {
		t.Run(store, func(t *testing.T) {
			var s3 *objstore.S3Config
			if store == "s3" {
				c := s3test.Start(t)
				s3 = &c
			}
			h := hosttest.New(t, stagedFunctions, func(c *app.Config) { c.S3 = s3 })
			home := t.TempDir()
			id, manifest := stageEdit(t, h, s3, home)
			out, errOut, code := runNoKey(t, home, "--nats", h.Srv.ClientURL(), "approvals", "show", id)
			if code != 0 {
				t.Fatalf("approvals show: exit %d: %s", code, errOut)
			}
			head, diff, ok := strings.Cut(out, "\n\n")
			if !ok || diff != wantStagedDiff(manifest) {
				t.Fatalf("approvals show printed:\n%s\nwant the diff:\n%s", out, wantStagedDiff(manifest))
			}
			for _, want := range []string{"job " + id + " (edit), flow " + id + ": waiting\n", "waits for a decision until ",
				"who may decide: a user with the role approver or above in the group ops, the operator, or a signed link",
				"decide: host approve " + id + "   or   host approve --reject " + id} {
				if !strings.Contains(head, want) {
					t.Errorf("approvals show lacks %q:\n%s", want, head)
				}
			}
			// --json is the view the host answered.
			out, errOut, code = runNoKey(t, home, "--nats", h.Srv.ClientURL(), "approvals", "show", id, "--json")
			var v review.View
			if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || len(v.Volumes) != 1 || v.Volumes[0].Diff == nil {
				t.Fatalf("approvals show --json: exit %d, %v, %s\n%s", code, err, errOut, out)
			}
			if d := v.Volumes[0].Diff; d.Added != 3 || d.Removed != 1 || d.Changed != 3 || d.Files[5].Path != "page.html" ||
				d.Files[5].Text != "--- /dev/null\n+++ b/page.html\n@@ -0,0 +1 @@\n+<script>alert(1)</script>\n" {
				t.Fatalf("approvals show --json: %+v", d)
			}
			// A staged version that is gone (rejected, discarded) says so, and the rest is shown.
			ctx := context.Background()
			rec, at, err := h.Store.GetRev(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			rec.Approval.Staged[0].Version, rec.Approval.Staged[0].Manifest = 3, sha("discarded")
			if _, err := h.Store.Amend(ctx, rec, at); err != nil {
				t.Fatal(err)
			}
			out, errOut, code = runNoKey(t, home, "--nats", h.Srv.ClientURL(), "approvals", "show", id)
			if want := "\nvolume repo: version 1 → staged version 3 (71 B in all, manifest " + sha("discarded")[:12] + ")\n  no diff: version 3 of volume repo (manifest " + sha("discarded")[:12] + "): the version is gone from the store: "; code != 0 || !strings.Contains(out, want) {
				t.Fatalf("a discarded version: exit %d, %s\n%s\nwant %q", code, errOut, out, want)
			}
			// What is not there says so.
			if _, errOut, code := runNoKey(t, home, "--nats", h.Srv.ClientURL(), "approvals", "show", "no-such-job"); code == 0 || !strings.Contains(errOut, "no such job") {
				t.Errorf("an unknown job: exit %d, %s", code, errOut)
			}
		})
	}
}
