package objstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/objstore"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// loseNATS is what a host finds after NATS lost its data while the store kept every byte. For
// S3 that is a brand-new NATS server on the same bucket. The JetStream Object Store lives in
// NATS, so losing NATS's data loses it too: there, the heads and leases buckets are deleted and
// the Object Store is kept, which is what a lost or purged KeyValue bucket leaves.
func (e *env) loseNATS(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	switch e.kind {
	case "s3":
		_, js := natstest.Start(t)
		b, err := objstore.NewS3Backend(ctx, e.s3)
		if err != nil {
			t.Fatal(err)
		}
		return &env{kind: e.kind, js: js, b: b, s3: e.s3}
	default:
		for _, bucket := range []string{objstore.HeadsBucket, objstore.LeasesBucket} {
			if err := e.js.DeleteKeyValue(ctx, bucket); err != nil {
				t.Fatalf("delete %s: %v", bucket, err)
			}
		}
		return e
	}
}

// volumeState is everything a user can list about the volumes: their infos and histories.
type volumeState struct {
	Infos     []objstore.VolumeInfo
	Histories map[string][]objstore.VersionInfo
}

func stateOf(t *testing.T, v *objstore.Volumes) volumeState {
	t.Helper()
	ctx := context.Background()
	infos, err := v.Infos(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := volumeState{Infos: infos, Histories: map[string][]objstore.VersionInfo{}}
	for _, in := range infos {
		if s.Histories[in.Name], err = v.History(ctx, in.Name); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func writeFile(name, content string) func(string) {
	return func(d string) {
		os.MkdirAll(filepath.Dir(filepath.Join(d, name)), 0o755)
		os.WriteFile(filepath.Join(d, name), []byte(content), 0o644)
	}
}

func markerKeys(t *testing.T, b objstore.Backend, name string) []string {
	t.Helper()
	keys, err := b.List(context.Background(), "heads/"+name+"/")
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// The heads and histories rebuilt from the store alone are the ones NATS had, and the volumes
// carry on from there: their content checks out and the next commit makes the next version.
func TestRecoverRebuildsEveryVolume(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		v := e.volumes(t)
		for i := range 3 {
			mountEdit(t, v, "notes", fmt.Sprint("notes-", i), writeFile(fmt.Sprintf("n%d.txt", i), fmt.Sprint("note ", i)))
		}
		// Past the kept history (10): old versions and their markers are collected.
		for i := range 12 {
			mountEdit(t, v, "ledger", fmt.Sprint("ledger-", i), writeFile("balance", fmt.Sprint(i)))
		}
		mountEdit(t, v, "cfg.v2", "cfg", func(d string) {
			os.WriteFile(filepath.Join(d, "empty"), nil, 0o600)
			os.Symlink("empty", filepath.Join(d, "link"))
		})
		if got := len(markerKeys(t, e.b, "ledger")); got != 10 {
			t.Fatalf("ledger has %d head markers in the store, want one per kept version (10)", got)
		}
		before := stateOf(t, v)

		e2 := e.loseNATS(t)
		v2 := e2.volumes(t)
		if s := stateOf(t, v2); len(s.Infos) != 0 {
			t.Fatalf("NATS lost its data, yet lists volumes: %+v", s.Infos)
		}
		rep, err := v2.Recover(ctx, objstore.RecoverOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Recovered != 3 || rep.Skipped != 0 || rep.Broken != 0 || len(rep.Volumes) != 3 {
			t.Fatalf("report: %+v", rep)
		}
		for _, rv := range rep.Volumes {
			if rv.Action != objstore.RecoverCreated || rv.NATSVersion != 0 || len(rv.Notes) != 0 {
				t.Errorf("volume %s: %+v", rv.Name, rv)
			}
		}
		if after := stateOf(t, v2); !reflect.DeepEqual(before, after) {
			t.Fatalf("recovered state differs:\nbefore %+v\nafter  %+v", before, after)
		}
		tree, _ := checkout(t, v2, "notes")
		diffTrees(t, map[string]node{"n0.txt": file(0o644, "note 0"), "n1.txt": file(0o644, "note 1"), "n2.txt": file(0o644, "note 2")}, tree)
		tree, _ = checkout(t, v2, "cfg.v2")
		diffTrees(t, map[string]node{"empty": file(0o600, ""), "link": link("empty")}, tree)
		if res := mountEdit(t, v2, "ledger", "after", writeFile("balance", "12")); res.Version != 13 {
			t.Fatalf("the next commit of ledger made version %d, want 13", res.Version)
		}
		if got := len(markerKeys(t, e.b, "ledger")); got != 10 {
			t.Fatalf("ledger has %d head markers after its next commit, want 10", got)
		}

		// Again, over the heads it just made: nothing moves.
		again, err := v2.Recover(ctx, objstore.RecoverOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if again.Recovered != 0 || again.Skipped != 3 {
			t.Fatalf("second recovery: %+v", again)
		}
		if info, _ := v2.Info(ctx, "ledger"); info.Version != 13 {
			t.Fatalf("ledger at version %d after a second recovery, want 13", info.Version)
		}
	})
}

// A commit interrupted before its head marker (data written, marker not) is never recovered as
// the head; nor is a version whose blobs a half-done collection took.
func TestRecoverPassesOverInterruptedCommits(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		v := e.volumes(t)
		mountEdit(t, v, "vol", "one", writeFile("a", "first"))
		mountEdit(t, v, "vol", "two", writeFile("a", "second"))

		// The marker's write fails for good, as if the host died right before it: the blobs
		// and the manifest of version 3 are in the store, its marker is not.
		fb := &flaky{Backend: e.b, putsLeft: -1, failPrefix: "heads/"}
		vf := e.volumesOn(t, fb, func(o *objstore.Options) { o.RetryFor = 200 * time.Millisecond })
		d := filepath.Join(t.TempDir(), "vol")
		m, err := vf.Mount(ctx, "vol", d, "three")
		if err != nil {
			t.Fatal(err)
		}
		writeFile("a", "third, never committed")(d)
		writeFile("b", "also never committed")(d)
		if _, err := m.Commit(ctx, "three"); err == nil {
			t.Fatal("a commit whose head marker cannot be written succeeded")
		}
		m.Release(ctx)
		blobs, manifests := storedKeys(t, e.b, "vol")
		if !blobs[sha("also never committed")] || len(manifests) != 3 {
			t.Fatalf("the interrupted commit should have left its data: blobs %v manifests %v", blobs, manifests)
		}

		v2 := e.loseNATS(t).volumes(t)
		rep, err := v2.Recover(ctx, objstore.RecoverOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Volumes) != 1 || rep.Volumes[0].StoreVersion != 2 || rep.Volumes[0].Versions != 2 {
			t.Fatalf("report: %+v", rep)
		}
		tree, _ := checkout(t, v2, "vol")
		diffTrees(t, map[string]node{"a": file(0o644, "second")}, tree)

		// Version 3 committed for real, then one of its blobs vanishes (a collection or a
		// removal that stopped half-way): its marker is passed over for version 2's.
		if res := mountEdit(t, v2, "vol", "three-again", writeFile("c", "third")); res.Version != 3 {
			t.Fatalf("version %d, want 3", res.Version)
		}
		if err := e.b.Delete(ctx, "volumes/vol/blobs/"+sha("third")); err != nil {
			t.Fatal(err)
		}
		v3 := e.loseNATS(t).volumes(t)
		rep, err = v3.Recover(ctx, objstore.RecoverOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rv := rep.Volumes[0]; rv.StoreVersion != 2 || rv.Action != objstore.RecoverCreated || len(rv.Notes) != 1 || !strings.Contains(rv.Notes[0], "missing") {
			t.Fatalf("report: %+v", rv)
		}
		tree, _ = checkout(t, v3, "vol")
		diffTrees(t, map[string]node{"a": file(0o644, "second")}, tree)
	})
}

// What recovery meets that it must not act on: it says what it found and changes nothing.
func TestRecoverChangesNothingItShouldNot(t *testing.T) {
	ctx := context.Background()
	headRev := func(t *testing.T, js jetstream.JetStream, name string) uint64 {
		t.Helper()
		kv, err := js.KeyValue(ctx, objstore.HeadsBucket)
		if err != nil {
			t.Fatal(err)
		}
		en, err := kv.Get(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return en.Revision()
	}
	forEachBackend(t, func(t *testing.T, e *env) {
		t.Run("an empty store", func(t *testing.T) {
			v := e.volumes(t)
			rep, err := v.Recover(ctx, objstore.RecoverOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Volumes) != 0 || rep.Recovered != 0 || len(rep.Unmarked) != 0 || rep.Store != e.b.Name() {
				t.Fatalf("report: %+v", rep)
			}
			if s := stateOf(t, v); len(s.Infos) != 0 {
				t.Fatalf("volumes after recovering from an empty store: %+v", s.Infos)
			}
		})

		v := e.volumes(t)
		mountEdit(t, v, "ahead", "one", writeFile("a", "1"))
		mountEdit(t, v, "ahead", "two", writeFile("a", "2"))
		// "behind": NATS's head is set back to version 1 while the store has version 2.
		mountEdit(t, v, "behind", "one", writeFile("b", "1"))
		kv, err := e.js.KeyValue(ctx, objstore.HeadsBucket)
		if err != nil {
			t.Fatal(err)
		}
		v1, err := kv.Get(ctx, "behind")
		if err != nil {
			t.Fatal(err)
		}
		mountEdit(t, v, "behind", "two", writeFile("b", "2"))
		if _, err := kv.Put(ctx, "behind", v1.Value()); err != nil {
			t.Fatal(err)
		}

		t.Run("heads at, past or behind the store's", func(t *testing.T) {
			revs := map[string]uint64{"ahead": headRev(t, e.js, "ahead"), "behind": headRev(t, e.js, "behind")}
			rep, err := v.Recover(ctx, objstore.RecoverOptions{})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"ahead": objstore.RecoverAtOrPast, "behind": objstore.RecoverBehind}
			if rep.Recovered != 0 || rep.Skipped != 2 || len(rep.Volumes) != 2 {
				t.Fatalf("report: %+v", rep)
			}
			for _, rv := range rep.Volumes {
				if rv.Action != want[rv.Name] || rv.StoreVersion != 2 {
					t.Errorf("%s: %+v, want action %q at store version 2", rv.Name, rv, want[rv.Name])
				}
				if got := headRev(t, e.js, rv.Name); got != revs[rv.Name] {
					t.Errorf("%s: head moved from revision %d to %d", rv.Name, revs[rv.Name], got)
				}
			}
			if info, _ := v.Info(ctx, "behind"); info.Version != 1 {
				t.Fatalf("behind: version %d, want it left at 1", info.Version)
			}
		})

		// Objects under heads/ that this package did not write: never trusted.
		crafted := `{"volume":"other","version":1,"versions":[{"version":1,"manifest":"` + sha("x") + `"}]}`
		for key, body := range map[string]string{
			"heads/junk": "x",
			"heads/evil/00000000000000000001-" + sha("x") + ".json": crafted,
		} {
			if err := e.b.Put(ctx, key, bytes.NewReader([]byte(body)), int64(len(body))); err != nil {
				t.Fatal(err)
			}
		}
		lost := e.loseNATS(t)

		t.Run("a dry run", func(t *testing.T) {
			v := lost.volumes(t)
			rep, err := v.Recover(ctx, objstore.RecoverOptions{DryRun: true})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Recovered != 2 || !rep.DryRun || rep.Volumes[0].Action != objstore.RecoverWouldCreate {
				t.Fatalf("report: %+v", rep)
			}
			if s := stateOf(t, v); len(s.Infos) != 0 {
				t.Fatalf("a dry run wrote heads: %+v", s.Infos)
			}
		})

		t.Run("a stray object and a crafted marker", func(t *testing.T) {
			v := lost.volumes(t)
			rep, err := v.Recover(ctx, objstore.RecoverOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Stray != 1 || rep.Broken != 1 || rep.Recovered != 2 {
				t.Fatalf("report: %+v", rep)
			}
			var evil objstore.RecoveredVolume
			for _, rv := range rep.Volumes {
				if rv.Name == "evil" {
					evil = rv
				}
			}
			if evil.Action != objstore.RecoverBroken || len(evil.Notes) != 1 || !strings.Contains(evil.Notes[0], `names volume "other"`) {
				t.Fatalf("the crafted marker: %+v", evil)
			}
			if _, err := v.Info(ctx, "evil"); err == nil {
				t.Fatal("a crafted marker became a head")
			}
		})

		t.Run("volumes without markers", func(t *testing.T) {
			keys, err := e.b.List(ctx, "heads/")
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				if err := e.b.Delete(ctx, k); err != nil {
					t.Fatal(err)
				}
			}
			v := e.loseNATS(t).volumes(t)
			rep, err := v.Recover(ctx, objstore.RecoverOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Recovered != 0 || len(rep.Volumes) != 0 || !reflect.DeepEqual(rep.Unmarked, []string{"ahead", "behind"}) {
				t.Fatalf("report: %+v", rep)
			}
			if s := stateOf(t, v); len(s.Infos) != 0 {
				t.Fatalf("volumes without markers were recovered: %+v", s.Infos)
			}
		})
	})
}

// A host starting on NATS that knows no volume recovers them; on one that does, it reads
// nothing from the store.
func TestRecoverIfEmpty(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		v := e.volumes(t)
		mountEdit(t, v, "vol", "one", writeFile("a", "1"))
		if _, ran, err := v.RecoverIfEmpty(ctx); err != nil || ran {
			t.Fatalf("on NATS that has heads: ran %v, %v", ran, err)
		}
		v2 := e.loseNATS(t).volumes(t)
		rep, ran, err := v2.RecoverIfEmpty(ctx)
		if err != nil || !ran || rep.Recovered != 1 {
			t.Fatalf("on empty NATS: ran %v, %+v, %v", ran, rep, err)
		}
		if info, err := v2.Info(ctx, "vol"); err != nil || info.Version != 1 {
			t.Fatalf("vol: %+v, %v", info, err)
		}
	})
}

// Removing a volume takes its markers with it: nothing is left to recover it from.
func TestRemoveTakesTheMarkers(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		v := e.volumes(t)
		mountEdit(t, v, "gone", "one", writeFile("a", "1"))
		if err := v.Remove(ctx, "gone", "test"); err != nil {
			t.Fatal(err)
		}
		if keys := markerKeys(t, e.b, "gone"); len(keys) != 0 {
			t.Fatalf("markers left after removal: %v", keys)
		}
	})
}

// Two markers for one version (a run that lost its lease died before deleting its own): the
// one written last wins, and the report says there were two.
func TestRecoverTwoMarkersForOneVersion(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		v := e.volumes(t)
		mountEdit(t, v, "vol", "one", writeFile("a", "1"))
		mountEdit(t, v, "vol", "two", writeFile("a", "2"))
		keys := markerKeys(t, e.b, "vol")
		read := func(key string) []byte {
			rc, err := e.b.Get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			var buf bytes.Buffer
			buf.ReadFrom(rc)
			return buf.Bytes()
		}
		realKey := keys[len(keys)-1]
		realHash := strings.TrimSuffix(realKey[strings.LastIndex(realKey, "-")+1:], ".json")
		// The rival: the same entries in a manifest of another hash (a trailing newline), and
		// a marker naming it, written a minute after the realKey one.
		man := append(read(fmt.Sprintf("volumes/vol/manifests/%020d-%s.json", 2, realHash)), '\n')
		rivalHash := sha(string(man))
		if err := e.b.Put(ctx, fmt.Sprintf("volumes/vol/manifests/%020d-%s.json", 2, rivalHash), bytes.NewReader(man), int64(len(man))); err != nil {
			t.Fatal(err)
		}
		var mk map[string]any
		if err := json.Unmarshal(read(realKey), &mk); err != nil {
			t.Fatal(err)
		}
		vs := mk["versions"].([]any)
		last := vs[len(vs)-1].(map[string]any)
		last["manifest"], last["job_id"] = rivalHash, "rival"
		tm, _ := time.Parse(time.RFC3339Nano, last["time"].(string))
		last["time"] = tm.Add(time.Minute)
		data, _ := json.Marshal(mk)
		rival := fmt.Sprintf("heads/vol/%020d-%s.json", 2, rivalHash)
		if err := e.b.Put(ctx, rival, bytes.NewReader(data), int64(len(data))); err != nil {
			t.Fatal(err)
		}
		v2 := e.loseNATS(t).volumes(t)
		rep, err := v2.Recover(ctx, objstore.RecoverOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rv := rep.Volumes[0]; rv.StoreVersion != 2 || len(rv.Notes) != 1 || !strings.Contains(rv.Notes[0], "2 markers for version 2") || !strings.Contains(rv.Notes[0], rival) {
			t.Fatalf("report: %+v", rv)
		}
		if hs, err := v2.History(ctx, "vol"); err != nil || hs[len(hs)-1].JobID != "rival" {
			t.Fatalf("history: %+v %v", hs, err)
		}
	})
}
