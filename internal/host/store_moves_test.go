package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/hosttest"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
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

// A run that succeeds after a later attempt of the same job failed (its host was cut off past
// the ack wait; JetStream gave the message to another host, whose attempt failed and wrote
// retrying) ends the job: its outputs are out, so its record says succeeded rather than staying
// retrying for good once its message is acked.
func TestEngineEarlierAttemptSucceedsOverALaterRetrying(t *testing.T) {
	started, block := make(chan string, 1), make(chan struct{})
	fake := newFake().on("slow", func(_ context.Context, j *jobtype.Job) *jobtype.Outcome {
		started <- j.ID
		<-block
		return &jobtype.Outcome{Result: []byte(`"done"`)}
	})
	h := hosttest.NewEngine(t, map[string]string{"slow.sh": "echo\n"}, fake)
	results := h.Sub(bus.ResultSubject("slow"))
	h.Publish(bus.RunSubject("slow"), `{}`, map[string]string{bus.HeaderMsgID: "cut-1"})
	if id := <-started; id != "cut-1" {
		t.Fatalf("started %s", id)
	}
	// The later attempt, elsewhere, failed meanwhile and said so in the record.
	ctx := context.Background()
	rec, v, err := h.Store.GetRev(ctx, "cut-1")
	if err != nil || rec.Status != jobtype.Running {
		t.Fatalf("record of the running job: %+v, %v", rec, err)
	}
	rec.Status, rec.Error, rec.Attempts, rec.Host = jobtype.Retrying, "commit volume v: the volume moved while this run held its lease", rec.Attempts+1, "another-host"
	if _, err := h.Store.Move(ctx, rec, v); err != nil {
		t.Fatal(err)
	}
	close(block)
	if m := h.Next(results); m.Header.Get(bus.HeaderJobID) != "cut-1" {
		t.Fatalf("heard the result of %q", m.Header.Get(bus.HeaderJobID))
	}
	final := h.Record("cut-1")
	if final.Status != jobtype.Succeeded || string(final.Result) != `"done"` {
		t.Fatalf("record after the earlier attempt succeeded: %s (%s) result %s; want succeeded with its result", final.Status, final.Error, final.Result)
	}
}
