package dashboard_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/host"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/objstore"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/web"
)

// commitFiles checks volume name out, writes files and removes remove, and commits a version.
func commitFiles(t *testing.T, vols *objstore.Volumes, name string, files map[string]string, remove ...string) {
	t.Helper()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "vol")
	m, err := vols.Mount(ctx, name, dir, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release(ctx)
	for p, content := range files {
		if err := os.WriteFile(filepath.Join(dir, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range remove {
		if err := os.Remove(filepath.Join(dir, p)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Commit(ctx, "writer"); err != nil {
		t.Fatal(err)
	}
}

// stageFiles is commitFiles for a staged step: the version is stored and recorded as staged,
// the head stays.
func stageFiles(t *testing.T, vols *objstore.Volumes, name, job string, files map[string]string, remove ...string) objstore.StageResult {
	t.Helper()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "vol")
	m, err := vols.Mount(ctx, name, dir, job)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release(ctx)
	for p, content := range files {
		if err := os.WriteFile(filepath.Join(dir, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range remove {
		if err := os.Remove(filepath.Join(dir, p)); err != nil {
			t.Fatal(err)
		}
	}
	res, err := m.Stage(ctx, job, jobs.MaxStagedPaths)
	if err != nil || !res.Staged {
		t.Fatalf("stage %s: %+v, %v", name, res, err)
	}
	return res
}

// lateStaged is the host's staged-volume store, opened once the host's NATS server runs.
type lateStaged struct{ v *objstore.Volumes }

func (l *lateStaged) Hold(ctx context.Context, names []string, holder string) (*objstore.Held, error) {
	return l.v.Hold(ctx, names, holder)
}

func (l *lateStaged) Discard(ctx context.Context, ref objstore.StagedRef, holder string) error {
	return l.v.Discard(ctx, ref, holder)
}

// AllStaged is the host's sweep for orphans, which starts before the store is open: none then.
func (l *lateStaged) AllStaged(ctx context.Context) ([]objstore.StagedEntry, error) {
	if l.v == nil {
		return nil, nil
	}
	return l.v.AllStaged(ctx)
}

func lines(prefix string, n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(prefix)
		b.WriteString(strings.Repeat("·", i%7))
		b.WriteString("\n")
	}
	return b.String()
}

// stagedSite is a step waiting for approval that staged version 2 of volume repo on version 1
// in the JetStream Object Store (the fake runner stages nothing: the test stages the version
// and writes it into the step's record, as the host would), served with the web face's pages:
// the dashboard and the signed links.
func stagedSite(t *testing.T) (*site, string, *objstore.Volumes) {
	t.Helper()
	staged := &lateStaged{}
	h := hosttest.NewEngine(t, map[string]string{"edit.sh": "# approve: timeout 1h\necho\n"}, fakeRunner{},
		func(c *host.Config) { c.Staged = staged })
	ctx := context.Background()
	js, err := jetstream.New(h.NC)
	if err != nil {
		t.Fatal(err)
	}
	b, err := objstore.NewJetStreamBackend(ctx, js, objstore.DefaultJetStreamBucket, 1)
	if err != nil {
		t.Fatal(err)
	}
	vols, err := objstore.New(ctx, js, b, objstore.Options{CacheDir: t.TempDir(), Log: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	commitFiles(t, vols, "repo", map[string]string{"README.md": "# repo\nold line\nend\n", "long.txt": lines("before ", 60), "logo.bin": "\x89PNG\x00\x01", "gone.txt": "bye\n"})
	staged.v = vols
	res := stageFiles(t, vols, "repo", "edit-1", map[string]string{"README.md": "# repo\nnew line\nend\n", "long.txt": lines("after ", 60), "logo.bin": "\x89PNG\x00\x02\x03",
		"page.html": "<script>alert(1)</script>\n"}, "gone.txt")
	cfg := h.WebConfig()
	cfg.Volumes = vols
	s := openSite(t, h, web.New(cfg))
	s.publish("edit", "edit-1", `{}`)
	h.Eventually("the step waits for a decision", func() bool {
		rec, err := h.Store.Get(ctx, "edit-1")
		return err == nil && rec.Status == jobtype.Waiting
	})
	rec, at, err := h.Store.GetRev(ctx, "edit-1")
	if err != nil {
		t.Fatal(err)
	}
	rec.Approval.Stage = true
	rec.Approval.Staged = []jobs.StagedVolume{{Volume: "repo", Base: res.Ref.Base, Version: res.Ref.Version, Manifest: res.Ref.Manifest,
		Added: res.Added, Removed: res.Removed, Changed: res.Changed, NAdded: res.NAdded, NRemoved: res.NRemoved, NChanged: res.NChanged, Bytes: res.Bytes}}
	if _, err := h.Store.Amend(ctx, rec, at); err != nil {
		t.Fatal(err)
	}
	link := host.ApprovalLink(s.url, ids.NewKey(h.Key).Derive, "edit-1", "approve", rec.Approval.Expires)
	return s, link, vols
}

// seesDiff checks what the page shows of the staged volume: the text diffs line by line, the
// script file as text (nothing ran), the long diff folded, the binary by sizes and hashes, the
// added and removed lines coloured by the style sheet (the CSP allows no inline style).
func (s *site) seesDiff(page string) {
	s.t.Helper()
	s.do("wait for the diff on "+page, chromedp.WaitVisible(`section.staged[data-volume="repo"] div.vd`))
	if h := get(s, "read the heading", chromedp.Text(`section.staged h3`)); !strings.HasPrefix(h, "volume repo: version 1 → staged version 2") {
		s.t.Fatalf("%s: heading %q", page, h)
	}
	want := map[string]string{
		"README.md": "--- a/README.md\n+++ b/README.md\n@@ -1,3 +1,3 @@\n # repo\n-old line\n+new line\n end",
		"page.html": "--- /dev/null\n+++ b/page.html\n@@ -0,0 +1 @@\n+<script>alert(1)</script>",
		"gone.txt":  "--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye",
	}
	for path, text := range want {
		got := get(s, "read the diff of "+path, chromedp.Text(`details[data-path="`+path+`"] pre.vd-text`))
		if strings.TrimSpace(got) != text {
			s.t.Errorf("%s: the diff of %s reads\n%s\nwant\n%s", page, path, got, text)
		}
	}
	if bin := get(s, "read the binary", chromedp.Text(`div.vd-row[data-path="logo.bin"]`)); !strings.Contains(bin, "binary, 6 B sha256:") || !strings.Contains(bin, "→ 7 B sha256:") {
		s.t.Errorf("%s: the binary file says %q", page, bin)
	}
	folded := get(s, "is the long diff folded", chromedp.Evaluate[bool](`!document.querySelector('details[data-path="long.txt"]').open && document.querySelector('details[data-path="README.md"]').open`))
	if !folded {
		s.t.Errorf("%s: the long diff is not folded, or a short one is", page)
	}
	colours := get(s, "read the colours", chromedp.Evaluate[string](`getComputedStyle(document.querySelector('span.vd-add')).backgroundColor + " " + getComputedStyle(document.querySelector('span.vd-del')).backgroundColor`))
	if colours != "rgb(232, 245, 233) rgb(255, 235, 238)" {
		s.t.Errorf("%s: added and removed lines are coloured %q", page, colours)
	}
	if n := get(s, "count scripts", chromedp.Evaluate[int](`document.querySelectorAll('div.vd script').length`)); n != 0 {
		s.t.Errorf("%s: the diff holds %d script elements", page, n)
	}
	if d := s.dialogsSeen(); len(d) != 0 {
		s.t.Fatalf("%s: a file's content ran as script: dialogs %q", page, d)
	}
}

// The job's page, the approvals inbox and the signed link's page show a staged step's diff.
func TestApprovalPagesShowTheStagedDiff(t *testing.T) {
	s, link, vols := stagedSite(t)
	s.do("open the waiting job", chromedp.Navigate(s.url+"/jobs/edit-1"), chromedp.WaitVisible(`#approve`))
	s.seesDiff("job page")
	s.screenshot("approval-job")
	s.do("open the inbox", chromedp.Navigate(s.url+"/inbox"), chromedp.WaitVisible(`section.approval[data-job="edit-1"]`))
	s.seesDiff("inbox")
	s.do("unfold the long diff", chromedp.Click(`details[data-path="long.txt"] summary`))
	if txt := get(s, "read the unfolded diff", chromedp.Text(`details[data-path="long.txt"] pre.vd-text`)); !strings.Contains(txt, "-before ·") || !strings.Contains(txt, "+after ·") {
		t.Errorf("the unfolded long diff reads %q", txt)
	}
	s.screenshot("approval-inbox")
	s.do("open the signed link", chromedp.Navigate(link), chromedp.WaitVisible(`button[type=submit]`))
	s.seesDiff("signed link")
	s.screenshot("approval-link")
	// The link still decides, and then shows no diff: nothing is staged any more.
	// The asking page has #link-text too: wait for the page the POST answers with.
	s.do("approve by the link", chromedp.Click(`button[type=submit]`), chromedp.WaitNotPresent(`button[type=submit]`), chromedp.WaitVisible(`#link-text`))
	if title := get(s, "read the title", chromedp.Text(`h1`)); title != "Job edit-1 approved" {
		t.Fatalf("after the link's button: %q\n%s", title, s.describe())
	}
	if n := get(s, "count diffs", chromedp.Evaluate[int](`document.querySelectorAll('div.vd').length`)); n != 0 {
		t.Fatalf("the decided page still shows %d diffs", n)
	}
	// The approval made the staged version the head.
	if info, err := vols.Info(context.Background(), "repo"); err != nil || info.Version != 2 {
		t.Fatalf("repo after the approval: %+v, %v", info, err)
	}
}
