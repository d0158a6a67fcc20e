package objstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agenthost/host/internal/objstore"
)

// mountStage mounts a volume into a fresh directory, lets edit change it, stages and releases.
func mountStage(t testing.TB, v *objstore.Volumes, name, job string, edit func(dir string)) objstore.StageResult {
	t.Helper()
	res, err := tryStage(v, t.TempDir(), name, job, edit)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func tryStage(v *objstore.Volumes, tmp, name, job string, edit func(dir string)) (objstore.StageResult, error) {
	ctx := context.Background()
	d := filepath.Join(tmp, "vol")
	m, err := v.Mount(ctx, name, d, job)
	if err != nil {
		return objstore.StageResult{}, err
	}
	defer m.Release(ctx)
	edit(d)
	return m.Stage(ctx, job, 50)
}

func TestStagePromote(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		v := e.volumes(t)
		old := map[string]node{"a": file(0o644, "one"), "b": file(0o644, "bee"), "d": dir(0o755)}
		mountEdit(t, v, "proj", "job-1", func(d string) { writeTree(t, d, old) })
		res := mountStage(t, v, "proj", "job-2", func(d string) {
			writeTree(t, d, map[string]node{"a": file(0o644, "two"), "d/c": file(0o600, "sea")})
			if err := os.Remove(filepath.Join(d, "b")); err != nil {
				t.Fatal(err)
			}
		})
		if !res.Staged || res.Ref.Base != 1 || res.Ref.Version != 2 || res.Ref.Volume != "proj" ||
			!slices.Equal(res.Added, []string{"d/c"}) || !slices.Equal(res.Removed, []string{"b"}) || !slices.Equal(res.Changed, []string{"a"}) ||
			res.NAdded != 1 || res.NRemoved != 1 || res.NChanged != 1 || res.Bytes != 6 {
			t.Fatalf("Stage = %+v", res)
		}
		// The staged manifest is where a committed version 2's would be.
		_, manifests := storedKeys(t, e.b, "proj")
		if want := fmt.Sprintf("manifests/%020d-%s.json", 2, res.Ref.Manifest); !slices.Contains(manifests, want) {
			t.Errorf("manifests %v lack %s", manifests, want)
		}
		// The head did not move: another job reads version 1.
		got, _ := checkout(t, v, "proj")
		diffTrees(t, old, got)
		if hist, _ := v.History(ctx, "proj"); len(hist) != 1 {
			t.Errorf("history after a stage: %+v", hist)
		}
		// Another host (a restarted one) promotes it.
		v2 := e.volumes(t)
		if err := v2.Promote(ctx, res.Ref, "approve:job-2"); err != nil {
			t.Fatal(err)
		}
		got, _ = checkout(t, v2, "proj")
		diffTrees(t, map[string]node{"a": file(0o644, "two"), "d": dir(0o755), "d/c": file(0o600, "sea")}, got)
		hist, _ := v2.History(ctx, "proj")
		if len(hist) != 2 || hist[1].Version != 2 || hist[1].JobID != "job-2" {
			t.Errorf("history after promote: %+v", hist)
		}
		// A decision that comes up again promotes nothing more and fails nothing.
		if err := v.Promote(ctx, res.Ref, "approve:job-2"); err != nil {
			t.Errorf("second promote: %v", err)
		}
		// The store alone still tells the head (its marker was written).
		keys, _ := e.b.List(ctx, "heads/proj/")
		if !slices.Contains(keys, fmt.Sprintf("heads/proj/%020d-%s.json", 2, res.Ref.Manifest)) {
			t.Errorf("head markers %v lack version 2's", keys)
		}
	})
}

func TestStageDiscardCollects(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		v := e.volumes(t)
		mountEdit(t, v, "proj", "job-1", func(d string) { writeTree(t, d, map[string]node{"a": file(0o644, "one")}) })
		before, beforeManifests := storedKeys(t, e.b, "proj")
		res := mountStage(t, v, "proj", "job-2", func(d string) {
			writeTree(t, d, map[string]node{"a": file(0o644, "one"), "n": file(0o644, "only staged")})
		})
		blobs, _ := storedKeys(t, e.b, "proj")
		if !blobs[sha("only staged")] {
			t.Fatalf("the staged blob is not in the store: %v", blobs)
		}
		if err := v.Discard(ctx, res.Ref, "reject:job-2"); err != nil {
			t.Fatal(err)
		}
		after, afterManifests := storedKeys(t, e.b, "proj")
		if !equalSets(before, after) || !slices.Equal(beforeManifests, afterManifests) {
			t.Errorf("after discard: blobs %v manifests %v; want %v %v", after, afterManifests, before, beforeManifests)
		}
		got, _ := checkout(t, v, "proj")
		diffTrees(t, map[string]node{"a": file(0o644, "one")}, got)
		if err := v.Promote(ctx, res.Ref, "approve:job-2"); !errors.Is(err, objstore.ErrStaleStage) || !strings.Contains(err.Error(), "gone") {
			t.Errorf("promote after discard: %v", err)
		}
		if err := v.Discard(ctx, res.Ref, "again"); err != nil {
			t.Errorf("second discard: %v", err)
		}
	})
}

// The collector, normal and sweeping, never deletes what a staged version uses; a head that
// moved refuses the promotion and keeps the head the commits made.
func TestStageSurvivesCollection(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		v := e.volumes(t, func(o *objstore.Options) { o.KeepVersions = 2 })
		mountEdit(t, v, "proj", "job-1", func(d string) { writeTree(t, d, map[string]node{"a": file(0o644, "v1")}) })
		res := mountStage(t, v, "proj", "stager", func(d string) {
			writeTree(t, d, map[string]node{"a": file(0o644, "v1"), "s": file(0o644, "staged content")})
		})
		for i := 2; i <= 5; i++ { // the first sweeps (the stage left the head dirty), later ones drop versions
			mountEdit(t, v, "proj", fmt.Sprintf("job-%d", i), func(d string) {
				writeTree(t, d, map[string]node{"a": file(0o644, fmt.Sprintf("v%d", i))})
			})
		}
		blobs, manifests := storedKeys(t, e.b, "proj")
		if !blobs[sha("staged content")] || !slices.Contains(manifests, fmt.Sprintf("manifests/%020d-%s.json", 2, res.Ref.Manifest)) {
			t.Fatalf("the collector deleted a staged version's data: blobs %v manifests %v", blobs, manifests)
		}
		// v1's content is the staged version's too, so it stays; v2's and v3's do not.
		if !equalSets(blobs, hashSet("v1", "staged content", "v4", "v5")) {
			t.Errorf("blobs after collection: %v", blobs)
		}
		err := v.Promote(ctx, res.Ref, "approve:stager")
		if !errors.Is(err, objstore.ErrStaleStage) || !strings.Contains(err.Error(), "moved to version 5") || !strings.Contains(err.Error(), "run the step again") {
			t.Errorf("promote over a moved head: %v", err)
		}
		got, _ := checkout(t, v, "proj")
		diffTrees(t, map[string]node{"a": file(0o644, "v5")}, got)
		if err := v.Discard(ctx, res.Ref, "reject:stager"); err != nil {
			t.Fatal(err)
		}
		blobs, manifests = storedKeys(t, e.b, "proj")
		if !equalSets(blobs, hashSet("v4", "v5")) || len(manifests) != 2 {
			t.Errorf("after discard: blobs %v manifests %v", blobs, manifests)
		}
	})
}

func TestStageTwiceOnOneVolume(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		v := e.volumes(t)
		mountEdit(t, v, "proj", "job-1", func(d string) { writeTree(t, d, map[string]node{"a": file(0o644, "base")}) })
		first := mountStage(t, v, "proj", "first", func(d string) { writeTree(t, d, map[string]node{"a": file(0o644, "first")}) })
		second := mountStage(t, v, "proj", "second", func(d string) { writeTree(t, d, map[string]node{"a": file(0o644, "second")}) })
		if first.Ref.Base != 1 || second.Ref.Base != 1 || first.Ref.Version != 2 || second.Ref.Version != 2 || first.Ref.Manifest == second.Ref.Manifest {
			t.Fatalf("refs %+v %+v", first.Ref, second.Ref)
		}
		if n := objstore.StagedCount(ctx, v, "proj"); n != 2 {
			t.Errorf("the head counts %d staged versions, want 2", n)
		}
		if err := v.Promote(ctx, first.Ref, "approve:first"); err != nil {
			t.Fatal(err)
		}
		if n := objstore.StagedCount(ctx, v, "proj"); n != 1 {
			t.Errorf("after a promote the head counts %d staged versions, want 1", n)
		}
		err := v.Promote(ctx, second.Ref, "approve:second")
		if !errors.Is(err, objstore.ErrStaleStage) || !strings.Contains(err.Error(), "moved to version 2") {
			t.Errorf("second promote: %v", err)
		}
		got, _ := checkout(t, v, "proj")
		diffTrees(t, map[string]node{"a": file(0o644, "first")}, got)
		if err := v.Discard(ctx, second.Ref, "reject:second"); err != nil {
			t.Fatal(err)
		}
		if n := objstore.StagedCount(ctx, v, "proj"); n != 0 {
			t.Errorf("after a discard the head counts %d staged versions, want 0", n)
		}
		blobs, _ := storedKeys(t, e.b, "proj")
		if !equalSets(blobs, hashSet("base", "first")) {
			t.Errorf("blobs after the second is discarded: %v", blobs)
		}
	})
}

func TestStageRemovedVolume(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		v := e.volumes(t)
		mountEdit(t, v, "proj", "job-1", func(d string) { writeTree(t, d, map[string]node{"a": file(0o644, "base")}) })
		res := mountStage(t, v, "proj", "stager", func(d string) { writeTree(t, d, map[string]node{"a": file(0o644, "new")}) })
		if err := v.Remove(ctx, "proj", "operator"); err != nil {
			t.Fatal(err)
		}
		err := v.Promote(ctx, res.Ref, "approve:stager")
		if !errors.Is(err, objstore.ErrStaleStage) || !strings.Contains(err.Error(), "removed") {
			t.Errorf("promote of a removed volume: %v", err)
		}
		if names, _ := v.List(ctx); len(names) != 0 {
			t.Errorf("volumes after remove and a refused promote: %v", names)
		}
		if err := v.Discard(ctx, res.Ref, "reject:stager"); err != nil {
			t.Errorf("discard of a removed volume's staged version: %v", err)
		}
	})
}

func TestStageOverLimit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		v := e.volumes(t, func(o *objstore.Options) { o.MaxBytes = 100 })
		mountEdit(t, v, "proj", "job-1", func(d string) { writeTree(t, d, map[string]node{"a": file(0o644, "base")}) })
		_, err := tryStage(v, t.TempDir(), "proj", "big", func(d string) {
			writeTree(t, d, map[string]node{"big": file(0o644, strings.Repeat("x", 200))})
		})
		if !errors.Is(err, objstore.ErrLimit) {
			t.Fatalf("stage over the limit: %v", err)
		}
		got, _ := checkout(t, v, "proj")
		diffTrees(t, map[string]node{"a": file(0o644, "base")}, got)
		if _, manifests := storedKeys(t, e.b, "proj"); len(manifests) != 1 {
			t.Errorf("manifests after a refused stage: %v", manifests)
		}
	})
}

func TestStageNothingChanged(t *testing.T) {
	e := newEnv(t, "jetstream")
	v := e.volumes(t)
	mountEdit(t, v, "proj", "job-1", func(d string) { writeTree(t, d, map[string]node{"a": file(0o644, "base")}) })
	if res := mountStage(t, v, "proj", "idle", func(string) {}); res.Staged {
		t.Errorf("a job that changed nothing staged %+v", res)
	}
}

// A step's volumes are promoted all or none: one head that moved refuses the others too.
func TestPromoteAllOrNone(t *testing.T) {
	e := newEnv(t, "jetstream")
	ctx := context.Background()
	v := e.volumes(t)
	for _, name := range []string{"va", "vb"} {
		mountEdit(t, v, name, "job-1", func(d string) { writeTree(t, d, map[string]node{"f": file(0o644, "base")}) })
	}
	a := mountStage(t, v, "va", "stager", func(d string) { writeTree(t, d, map[string]node{"f": file(0o644, "a staged")}) })
	b := mountStage(t, v, "vb", "stager", func(d string) { writeTree(t, d, map[string]node{"f": file(0o644, "b staged")}) })
	mountEdit(t, v, "vb", "other", func(d string) { writeTree(t, d, map[string]node{"f": file(0o644, "b moved")}) })
	err := v.PromoteAll(ctx, []objstore.StagedRef{b.Ref, a.Ref}, "approve:stager")
	if !errors.Is(err, objstore.ErrStaleStage) || !strings.Contains(err.Error(), "volume vb") || !strings.Contains(err.Error(), "no head was moved") {
		t.Errorf("PromoteAll with one head moved: %v", err)
	}
	got, _ := checkout(t, v, "va")
	diffTrees(t, map[string]node{"f": file(0o644, "base")}, got)
	if err := v.PromoteAll(ctx, []objstore.StagedRef{a.Ref}, "approve:stager"); err != nil {
		t.Fatal(err)
	}
	got, _ = checkout(t, v, "va")
	diffTrees(t, map[string]node{"f": file(0o644, "a staged")}, got)
}

// A volume's first version can be staged: until approved the volume has no version at all.
func TestStageNewVolume(t *testing.T) {
	e := newEnv(t, "jetstream")
	ctx := context.Background()
	v := e.volumes(t)
	res := mountStage(t, v, "fresh", "first", func(d string) { writeTree(t, d, map[string]node{"a": file(0o644, "first")}) })
	if !res.Staged || res.Ref.Base != 0 || res.Ref.Version != 1 || !slices.Equal(res.Added, []string{"a"}) {
		t.Fatalf("Stage of a new volume = %+v", res)
	}
	if names, _ := v.List(ctx); slices.Contains(names, "fresh") {
		t.Errorf("a volume with only a staged version is listed: %v", names)
	}
	got, _ := checkout(t, v, "fresh")
	diffTrees(t, map[string]node{}, got)
	if err := v.Promote(ctx, res.Ref, "approve:first"); err != nil {
		t.Fatal(err)
	}
	got, _ = checkout(t, v, "fresh")
	diffTrees(t, map[string]node{"a": file(0o644, "first")}, got)
}
