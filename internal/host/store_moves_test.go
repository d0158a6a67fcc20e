package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// A host too slow to answer a cancel leaves `host cancel` to write the record canceled itself
// (its host stopped answering, as far as it can tell). When the job then ends on its own, the
// host's late succeeded is a move the store refuses against what it holds: the record stays
// canceled, the caller hears canceled, and the host says so.
func TestEngineCancelOutlivesTheHostsLateVerdict(t *testing.T) {
	started, block := make(chan string, 1), make(chan struct{})
	fake := newFake().on("slow", func(_ context.Context, j *jobtype.Job) *jobtype.Outcome {
		started <- j.ID
		<-block // deaf to its context too: it ends when it ends
		return &jobtype.Outcome{Result: []byte(`"done late"`)}
	})
	h := hosttest.NewEngine(t, map[string]string{"slow.sh": "echo\n"}, fake)
	c := newClient(t, h)
	if err := h.Host.DeafToCancels(); err != nil {
		t.Fatal(err)
	}
	call := nats.NewMsg(bus.CallSubject("slow"))
	call.Header.Set(bus.HeaderMsgID, "late-1")
	replies := make(chan *nats.Msg, 1)
	go func() { replies <- h.CallMsg(call, `{}`) }()
	if id := <-started; id != "late-1" {
		t.Fatalf("started %s", id)
	}
	canceled, err := c.Cancel(context.Background(), "late-1")
	if err != nil || canceled.Status != jobtype.Canceled || canceled.Was != jobtype.Running || canceled.StoppedBy != "" {
		t.Fatalf("cancel of a job whose host does not answer: %+v, %v", canceled, err)
	}
	close(block)
	h.WaitLog("the job's record was ended by someone else meanwhile; the store keeps theirs", 0)
	if reply := h.Next(replies); reply.Header.Get(bus.HeaderJobStatus) != "failed" || !strings.Contains(string(reply.Data), "was canceled meanwhile") {
		t.Fatalf("the caller heard %v %s, want the cancel", reply.Header, reply.Data)
	}
	rec, err := h.Store.Get(context.Background(), "late-1")
	if err != nil || rec.Status != jobtype.Canceled || !strings.Contains(rec.Error, "canceled by") || rec.Result != nil {
		t.Fatalf("record after the host's late verdict: %+v, %v", rec, err)
	}
}

// A job that fails once and then succeeds writes its record along legal edges only, as a
// watcher of the bucket sees every write: running, retrying, running again, succeeded.
func TestEngineRetriedRecordMovesLegally(t *testing.T) {
	tries := 0
	fake := newFake().on("flaky", func(context.Context, *jobtype.Job) *jobtype.Outcome {
		if tries++; tries == 1 {
			return &jobtype.Outcome{Err: errors.New("not yet"), ExitCode: 1}
		}
		return &jobtype.Outcome{Result: []byte(`"second time"`)}
	})
	h := hosttest.NewEngine(t, map[string]string{"flaky.sh": "# retries: 1\necho\n"}, fake)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js, err := jetstream.New(h.NC)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, jobs.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.Watch(ctx, "flaky-1", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	h.Publish(bus.RunSubject("flaky"), `{}`, map[string]string{bus.HeaderMsgID: "flaky-1"})
	var seen []jobtype.Status
	for last := jobtype.None; !last.Final(); {
		select {
		case e := <-w.Updates():
			if e == nil {
				continue
			}
			var rec jobs.Record
			if err := json.Unmarshal(e.Value(), &rec); err != nil {
				t.Fatal(err)
			}
			if err := last.To(rec.Status); err != nil {
				t.Fatalf("the record moved %q → %q after %v: %v", last, rec.Status, seen, err)
			}
			seen = append(seen, rec.Status)
			last = rec.Status
		case <-ctx.Done():
			t.Fatalf("no final record; the record went %v", seen)
		}
	}
	want := []jobtype.Status{jobtype.Running, jobtype.Retrying, jobtype.Running, jobtype.Succeeded}
	if !slices.Equal(seen, want) {
		t.Fatalf("the record went %v, want %v", seen, want)
	}
	if n := h.Logs.FilterMessageSnippet("illegal").Len(); n != 0 {
		t.Fatalf("the host logged %d illegal moves", n)
	}
}

// The partition case: a host cut off past the ack wait finishes its run after JetStream gave
// the message to another host, whose later attempt claimed the job and failed (retrying). The
// store fences the older attempt's late success (as Temporal rejects a stale attempt's
// completion): its outputs are out, but the record stays the later attempt's, and the message
// is left to that attempt rather than acked (an ack would leave the job retrying for good).
// The job then ends by its next delivery.
func TestEngineStaleAttemptsLateSuccessIsFenced(t *testing.T) {
	started, block := make(chan string, 2), make(chan struct{})
	var runs atomic.Int32
	fake := newFake().on("slow", func(_ context.Context, j *jobtype.Job) *jobtype.Outcome {
		started <- j.ID
		if runs.Add(1) == 1 {
			<-block // the cut-off host's run
			return &jobtype.Outcome{Result: []byte(`"late"`)}
		}
		return &jobtype.Outcome{Result: []byte(`"redelivered"`)}
	})
	h := hosttest.NewEngine(t, map[string]string{"slow.sh": "echo\n"}, fake)
	results := h.Sub(bus.ResultSubject("slow"))
	h.Publish(bus.RunSubject("slow"), `{}`, map[string]string{bus.HeaderMsgID: "cut-1"})
	if id := <-started; id != "cut-1" {
		t.Fatalf("started %s", id)
	}
	// The later attempt, elsewhere, claimed the job and failed meanwhile.
	ctx := context.Background()
	rec, v, err := h.Store.GetRev(ctx, "cut-1")
	if err != nil || rec.Status != jobtype.Running || rec.Attempts != 1 {
		t.Fatalf("record of the running job: %+v, %v", rec, err)
	}
	rec.Status, rec.Attempts, rec.Host = jobtype.Running, 2, "another-host"
	if v, err = h.Store.Move(ctx, rec, v); err != nil {
		t.Fatal(err)
	}
	rec.Status, rec.Error = jobtype.Retrying, "commit volume v: the volume moved while this run held its lease"
	if _, err := h.Store.Move(ctx, rec, v); err != nil {
		t.Fatal(err)
	}
	close(block)
	// The stale attempt's outputs are out: published before its record was refused.
	if m := h.Next(results); m.Header.Get(bus.HeaderJobID) != "cut-1" || string(m.Data) != `"late"` {
		t.Fatalf("heard the result %s of %q", m.Data, m.Header.Get(bus.HeaderJobID))
	}
	h.WaitLog("a later attempt of the job holds its record; this attempt's end is not the job's, and the message is left to it", 0)
	if got, err := h.Store.Get(ctx, "cut-1"); err != nil || got.Status != jobtype.Retrying || got.Attempts != 2 || got.Host != "another-host" || got.Result != nil {
		t.Fatalf("record after the stale attempt's success: %+v, %v; want the later attempt's, retrying", got, err)
	}
	// Not acked: the message is delivered again after the ack wait, and that attempt ends the job.
	if id := <-started; id != "cut-1" {
		t.Fatalf("started %s", id)
	}
	final := h.Record("cut-1")
	if final.Status != jobtype.Succeeded || string(final.Result) != `"redelivered"` || final.Attempts < 2 {
		t.Fatalf("record after the redelivery: %s (%s) attempt %d result %s; want succeeded by a later attempt", final.Status, final.Error, final.Attempts, final.Result)
	}
	if n := h.Logs.FilterMessageSnippet("illegal").Len(); n != 0 {
		t.Fatalf("the host logged %d illegal moves", n)
	}
}

// A delivery older than the attempt that holds the job's record is fenced at its claim: it
// does not run, and leaves the message, whose next delivery runs as the later attempt.
func TestEngineStaleDeliveryDoesNotRun(t *testing.T) {
	var runs atomic.Int32
	fake := newFake().on("quick", func(_ context.Context, j *jobtype.Job) *jobtype.Outcome {
		runs.Add(1)
		return &jobtype.Outcome{Result: []byte(`"ran"`)}
	})
	h := hosttest.NewEngine(t, map[string]string{"quick.sh": "echo\n"}, fake)
	// Attempt 3 of the job holds it (claimed elsewhere, its host since gone).
	hosttest.PutRecord(t, h.Store, &jobs.Record{ID: "ahead-1", Function: "quick", Status: jobtype.Running, Attempts: 3, Host: "another-host"})
	h.Publish(bus.RunSubject("quick"), `{}`, map[string]string{bus.HeaderMsgID: "ahead-1"})
	h.WaitLog("a later attempt of the job holds its record; this attempt's end is not the job's, and the message is left to it", 0)
	if n := runs.Load(); n != 0 {
		t.Fatalf("the stale delivery ran %d times", n)
	}
	// Its next delivery, after the ack wait, reads the record and runs as no older an attempt.
	final := h.Record("ahead-1")
	if final.Status != jobtype.Succeeded || final.Attempts < 3 || final.Host != "test" || runs.Load() != 1 {
		t.Fatalf("record after the redelivery: %s attempt %d on %s, %d runs; want succeeded here, once, as attempt 3 or later", final.Status, final.Attempts, final.Host, runs.Load())
	}
}
