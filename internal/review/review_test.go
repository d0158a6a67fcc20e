package review_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/objstore"
	"github.com/agenthost/host/internal/review"
	"github.com/agenthost/host/internal/testkit/natstest"
	"github.com/agenthost/host/internal/voldiff"
)

// staged commits two versions of volume name, the second holding files, and returns the
// record entry of a step that staged the second on the first.
func staged(t *testing.T, v *objstore.Volumes, name string, files map[string]string) jobs.StagedVolume {
	t.Helper()
	ctx := context.Background()
	for _, write := range []map[string]string{{"seed": "x\n"}, files} {
		dir := filepath.Join(t.TempDir(), "vol")
		m, err := v.Mount(ctx, name, dir, "job")
		if err != nil {
			t.Fatal(err)
		}
		for p, c := range write {
			if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := m.Commit(ctx, "job"); err != nil {
			t.Fatal(err)
		}
		m.Release(ctx)
	}
	h, err := v.History(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return jobs.StagedVolume{Volume: name, Base: 1, Version: 2, Manifest: h[1].Manifest, Bytes: h[1].TotalBytes}
}

// The bounds of a view are shared by its volumes, in order: the second volume gets what the
// first left, and one after them none, which it says.
func TestBuildSharesTheBounds(t *testing.T) {
	ctx := context.Background()
	_, js := natstest.Start(t)
	b, err := objstore.NewJetStreamBackend(ctx, js, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	v, err := objstore.New(ctx, js, b, objstore.Options{CacheDir: t.TempDir(), Log: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("a line of text\n", 40) // 600 B, about 650 B of diff
	rec := &jobs.Record{ID: "j1", Function: "edit", FlowID: "j1", Status: jobtype.Waiting,
		Approval: &jobs.Approval{Expires: time.Now().Add(time.Hour), Stage: true, Staged: []jobs.StagedVolume{
			staged(t, v, "one", map[string]string{"a.txt": text}),
			staged(t, v, "two", map[string]string{"b.txt": text}),
			staged(t, v, "three", map[string]string{"c.txt": text}),
		}}}
	view := review.Build(ctx, v, rec, voldiff.Options{MaxTextBytes: 1000})
	if len(view.Volumes) != 3 {
		t.Fatalf("volumes %+v", view.Volumes)
	}
	one, two, three := view.Volumes[0], view.Volumes[1], view.Volumes[2]
	if one.Diff == nil || one.Diff.CutAt != "" || two.Diff == nil || two.Diff.CutAt != "b.txt" || one.Diff.TextBytes+two.Diff.TextBytes > 1000 {
		t.Fatalf("one %+v\ntwo %+v", one.Diff, two.Diff)
	}
	if three.Diff != nil || !strings.Contains(three.Error, "used up the bounds of one view") {
		t.Fatalf("three %+v", three)
	}
	var out bytes.Buffer
	if err := view.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"volume one: version 1 → staged version 2", "  added    a.txt", "  no diff: not diffed: the volumes before it used up"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, out.String())
		}
	}
	// Without a volume store, each volume says so.
	if got := review.Build(ctx, nil, rec, voldiff.Options{}); got.Volumes[0].Error != "this host has no volume store, so it cannot read the staged version" {
		t.Fatalf("no store: %+v", got.Volumes[0])
	}
}
