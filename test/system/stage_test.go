package system_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/host"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/objstore"
	"github.com/agenthost/host/internal/people"
	"github.com/agenthost/host/internal/review"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/testkit/s3test"
)

// The functions of the staged-approval tests: seed commits as any step does; edit stages its
// change for a decision, then readnext (its next step) reads the volume; read reads it meanwhile;
// quick times out; big is over the volume limit.
var stageFiles = map[string]string{
	"seed.sh": "# sandbox\n# volume: repo repo\nread -r payload\necho \"$payload\" > repo/f\necho '\"seeded\"'\n",
	"edit.sh": "# sandbox\n# volume: repo repo\n# approve: timeout 1h stage\n# next: agent.run.readnext\n" +
		"read -r payload\necho \"$payload\" > repo/f\necho '{\"edited\":true}'\n",
	"readnext.sh": "# sandbox\n# volume: repo repo\ncat repo/f\n",
	"read.sh":     "# sandbox\n# volume: repo repo\ncat repo/f\n",
	"quick.sh":    "# sandbox\n# volume: repo repo\n# approve: timeout 2s stage\nread -r payload\necho \"$payload\" > repo/f\necho '\"quick\"'\n",
	"big.sh":      "# sandbox\n# volume: repo repo\n# approve: stage\nhead -c 3000000 /dev/zero > repo/big\necho '\"big\"'\n",
}

// stageEnv is a host with the staged functions, on one volume store.
type stageEnv struct {
	t   *testing.T
	h   *hosttest.H
	c   *client.Client
	s3  *objstore.S3Config
	v   *objstore.Volumes // the test's own view of the store, as `host volumes` opens it
	b   objstore.Backend
	ctx context.Context
}

func newStageEnv(t *testing.T, useS3 bool) *stageEnv {
	e := &stageEnv{t: t, ctx: context.Background()}
	if useS3 {
		s3 := s3test.Start(t)
		e.s3 = &s3
	}
	e.h = hosttest.New(t, stageFiles, func(c *app.Config) { c.S3 = e.s3; c.Volumes.MaxBytes = 1 << 20 })
	var err error
	if e.c, err = client.New(e.ctx, e.h.NC); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(e.h.NC)
	if e.v, err = objstore.Open(e.ctx, js, e.s3, objstore.Options{Log: zap.NewNop()}); err != nil {
		t.Fatal(err)
	}
	if useS3 {
		e.b, err = objstore.NewS3Backend(e.ctx, *e.s3)
	} else {
		e.b, err = objstore.NewJetStreamBackend(e.ctx, js, "", 1)
	}
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// stage publishes a trigger of fn and waits for its record to wait for a decision.
func (e *stageEnv) stage(fn, id, payload string) *jobs.Record {
	e.t.Helper()
	e.h.Publish(bus.RunSubject(fn), payload, map[string]string{bus.HeaderMsgID: id})
	var rec *jobs.Record
	e.h.Eventually("job "+id+" waits for a decision", func() bool {
		var err error
		rec, err = e.h.Store.Get(e.ctx, id)
		return err == nil && rec.Status == jobtype.Waiting
	})
	return rec
}

func (e *stageEnv) decide(id string, approve bool) *jobs.Record {
	e.t.Helper()
	rec, err := e.c.Decide(e.ctx, id, approve, people.Operator("ada", "test"), "")
	if err != nil {
		e.t.Fatalf("decide %s: %v", id, err)
	}
	return rec
}

func (e *stageEnv) head() string { return strings.TrimSpace(e.h.ReadVolume(e.s3, "repo", "f")) }

// stored reports whether the store holds the staged manifest and the blob of content.
func (e *stageEnv) stored(s jobs.StagedVolume, content string) (manifest, blob bool) {
	keys, err := e.b.List(e.ctx, "volumes/repo/")
	if err != nil {
		e.t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(content))
	return slices.ContainsFunc(keys, func(k string) bool { return strings.HasSuffix(k, "-"+s.Manifest+".json") }),
		slices.Contains(keys, "volumes/repo/blobs/"+hex.EncodeToString(sum[:]))
}

func TestStagedApproval(t *testing.T) {
	for _, kind := range []string{"jetstream", "s3"} {
		t.Run(kind, func(t *testing.T) { stagedApproval(t, newStageEnv(t, kind == "s3")) })
	}
}

func stagedApproval(t *testing.T, e *stageEnv) {
	h := e.h
	if got := string(h.Call("seed", `{"v":"old"}`).Data); got != `"seeded"` {
		t.Fatalf("seed: %s", got)
	}
	announced := h.Sub(bus.ApprovalSubject("edit"))
	results := h.Sub(bus.ResultSubject("readnext"))

	// Staged: the record says what would change; the head does not move; another job reads it.
	rec := e.stage("edit", "edit-1", `{"v":"new"}`)
	a := rec.Approval
	if !a.Stage || len(a.Staged) != 1 || a.Staged[0].Volume != "repo" || a.Staged[0].Base != 1 || a.Staged[0].Version != 2 ||
		!slices.Equal(a.Staged[0].Changed, []string{"f"}) || a.Staged[0].NChanged != 1 || a.Staged[0].NAdded != 0 || len(a.Staged[0].Manifest) != 64 {
		t.Fatalf("waiting record's approval %+v", a)
	}
	if len(rec.Volumes) != 1 || rec.Volumes[0].Staged != 2 || rec.Volumes[0].Committed != 0 {
		t.Errorf("record's volumes %+v", rec.Volumes)
	}
	ev := hosttest.Decode[host.ApprovalEvent](t, h.Next(announced).Data)
	if len(ev.Staged) != 1 || !slices.Equal(ev.Staged[0].Changed, []string{"f"}) || ev.Staged[0].NChanged != 1 {
		t.Errorf("announcement's staged %+v", ev.Staged)
	}
	if got := e.head(); got != `{"v":"old"}` {
		t.Fatalf("head while staged: %s", got)
	}
	// What `host approvals show` prints: the really staged version's diff, from the host.
	view, err := review.Ask(e.ctx, h.NC, "edit-1")
	if err != nil {
		t.Fatalf("approvals show edit-1: %v", err)
	}
	var shown strings.Builder
	if err := view.WriteText(&shown); err != nil {
		t.Fatal(err)
	}
	if out := shown.String(); !strings.Contains(out, "version 1 → staged version 2") || !strings.Contains(out, "changed  f ") ||
		!strings.Contains(out, "-{\"v\":\"old\"}\n") || !strings.Contains(out, "+{\"v\":\"new\"}\n") {
		t.Fatalf("approvals show edit-1:\n%s", shown.String())
	}
	if got := string(h.Call("read", "{}").Data); got != `{"v":"old"}` {
		t.Fatalf("another job while staged read %s", got)
	}

	// Approved: the head moves, and the next step reads the new files.
	if done := e.decide("edit-1", true); done.Status != jobtype.Succeeded {
		t.Fatalf("approve: %+v", done)
	}
	if got := string(h.Next(results).Data); got != `{"v":"new"}` {
		t.Fatalf("the next step read %s", got)
	}
	if got := e.head(); got != `{"v":"new"}` {
		t.Fatalf("head after approve: %s", got)
	}

	// Rejected: the head stays, the staged data is collected.
	rec = e.stage("edit", "edit-2", `{"v":"rejected"}`)
	if m, b := e.stored(rec.Approval.Staged[0], "{\"v\":\"rejected\"}\n"); !m || !b {
		t.Fatalf("staged data in the store: manifest %v blob %v", m, b)
	}
	if done := e.decide("edit-2", false); done.Status != jobtype.Failed {
		t.Fatalf("reject: %+v", done)
	}
	// Collected right after the decision is recorded (the decider hears of it first).
	h.Eventually("the rejected step's staged manifest and blob are collected", func() bool {
		m, b := e.stored(rec.Approval.Staged[0], "{\"v\":\"rejected\"}\n")
		return !m && !b
	})
	if got := e.head(); got != `{"v":"new"}` {
		t.Fatalf("head after reject: %s", got)
	}

	// Timed out: discarded as a rejection.
	rec = e.stage("quick", "quick-1", `{"v":"late"}`)
	h.Eventually("the approval times out and its staged data goes", func() bool {
		r, err := h.Store.Get(e.ctx, "quick-1")
		m, b := e.stored(rec.Approval.Staged[0], "{\"v\":\"late\"}\n")
		return err == nil && r.Status == jobtype.Failed && strings.Contains(r.Error, "timed out") && !m && !b
	})
	if got := e.head(); got != `{"v":"new"}` {
		t.Fatalf("head after a timeout: %s", got)
	}

	// Two staged steps on one volume: the first approved wins, the second is refused.
	e.stage("edit", "edit-a", `{"v":"a"}`)
	e.stage("edit", "edit-b", `{"v":"b"}`)
	if done := e.decide("edit-a", true); done.Status != jobtype.Succeeded {
		t.Fatalf("approve a: %+v", done)
	}
	h.Next(results)
	done := e.decide("edit-b", true)
	if done.Status != jobtype.Failed || !strings.Contains(done.Error, "moved to version 3") || !strings.Contains(done.Error, "run the step again") {
		t.Fatalf("approve b after a: %+v", done)
	}
	if got := e.head(); got != `{"v":"a"}` {
		t.Fatalf("head after a then b: %s", got)
	}

	// Over the volume limit: the step fails as a commit over it does, and waits for nothing.
	ee := hosttest.Decode[jobs.ErrorEvent](t, h.Call("big", "{}").Data)
	if !strings.Contains(ee.Error, "limit") {
		t.Errorf("over the limit: %+v", ee)
	}

	// A host restart while staged: the record and the staged version survive, and the
	// approval after it promotes. A staged version whose job has ended (its host died before
	// recording it) is swept when a host starts.
	e.stage("edit", "edit-r", `{"v":"restarted"}`)
	orphan := e.orphan("edit-2", "orphaned\n")
	if m, _ := e.stored(orphan, "orphaned\n"); !m {
		t.Fatal("the orphan's manifest is not in the store")
	}
	h.Restart(30 * time.Second)
	h.Eventually("the orphaned staged version is swept at start", func() bool {
		m, b := e.stored(orphan, "orphaned\n")
		return !m && !b
	})
	if done := e.decide("edit-r", true); done.Status != jobtype.Succeeded {
		t.Fatalf("approve after a restart: %+v", done)
	}
	if got := string(h.Next(results).Data); got != `{"v":"restarted"}` {
		t.Fatalf("the next step after a restart read %s", got)
	}

	// Two decisions at once, approve and reject: whichever is recorded is what the volume got.
	for i, v := range []string{"race-1", "race-2", "race-3"} {
		before := e.head()
		e.stage("edit", v, `{"v":"`+v+`"}`)
		decided := make(chan error, 2)
		for _, approve := range []bool{true, false} {
			go func() {
				_, err := e.c.Decide(e.ctx, v, approve, people.Operator("ada", "test"), "")
				decided <- err
			}()
		}
		<-decided
		<-decided
		var rec *jobs.Record
		h.Eventually("the race's step is decided", func() bool {
			var err error
			rec, err = h.Store.Get(e.ctx, v)
			return err == nil && rec.Status != jobtype.Waiting
		})
		want := before
		if rec.Status == jobtype.Succeeded {
			want = `{"v":"` + v + `"}`
			h.Next(results)
		}
		if got := e.head(); got != want {
			t.Fatalf("race %d: the record says %s (%s) but the head is %s", i, rec.Status, rec.Approval.Decision, got)
		}
	}

	// The volume removed while staged: approve is refused and says why.
	e.stage("edit", "edit-x", `{"v":"gone"}`)
	if err := e.v.Remove(e.ctx, "repo", "operator"); err != nil {
		t.Fatal(err)
	}
	done = e.decide("edit-x", true)
	if done.Status != jobtype.Failed || !strings.Contains(done.Error, "removed") {
		t.Fatalf("approve of a removed volume: %+v", done)
	}
	if names := h.VolumeNames(e.s3); slices.Contains(names, "repo") {
		t.Errorf("volumes after a refused promote of a removed one: %v", names)
	}
}

// orphan stages content in the repo volume as job would have, without any record saying so.
func (e *stageEnv) orphan(job, content string) jobs.StagedVolume {
	e.t.Helper()
	js, _ := jetstream.New(e.h.NC)
	v, err := objstore.Open(e.ctx, js, e.s3, objstore.Options{Log: zap.NewNop(), CacheDir: e.t.TempDir()})
	if err != nil {
		e.t.Fatal(err)
	}
	d := filepath.Join(e.t.TempDir(), "vol")
	m, err := v.Mount(e.ctx, "repo", d, job)
	if err != nil {
		e.t.Fatal(err)
	}
	defer m.Release(e.ctx)
	if err := os.WriteFile(filepath.Join(d, "orphan"), []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
	res, err := m.Stage(e.ctx, job, 50)
	if err != nil || !res.Staged {
		e.t.Fatalf("stage an orphan: %+v %v", res, err)
	}
	return jobs.StagedVolume{Volume: "repo", Version: res.Ref.Version, Manifest: res.Ref.Manifest}
}
