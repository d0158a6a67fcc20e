package host_test

import (
	"context"
	"testing"
	"time"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// A function with delay: runs each trigger no sooner than that after it was published. The
// trigger waits in the stream, not in a run slot: with concurrency 1, a second trigger is
// taken (and deferred) while the first waits. The deliveries spent waiting are not attempts.
func TestEngineDelay(t *testing.T) {
	fake := newFake()
	h := hosttest.NewEngine(t, map[string]string{"later.sh": "# delay: 2s\n# concurrency: 1\necho\n"}, fake)
	h.Publish(bus.RunSubject("later"), `{}`, map[string]string{bus.HeaderMsgID: "later-a"})
	h.Publish(bus.RunSubject("later"), `{}`, map[string]string{bus.HeaderMsgID: "later-b"})
	ctx := context.Background()
	h.Eventually("both triggers taken and deferred, neither run", func() bool {
		a, errA := h.Store.Get(ctx, "later-a")
		b, errB := h.Store.Get(ctx, "later-b")
		return errA == nil && errB == nil && a.Status == jobtype.Queued && b.Status == jobtype.Queued &&
			!a.NotBefore.IsZero() && !b.NotBefore.IsZero() && fake.count("later") == 0
	})
	for _, id := range []string{"later-a", "later-b"} {
		rec := h.Record(id)
		if rec.Status != jobtype.Succeeded || rec.Attempts != 1 || rec.Deferrals < 1 {
			t.Fatalf("%s: %+v", id, rec)
		}
		if rec.Started.Before(rec.Enqueued.Add(2*time.Second)) || !rec.NotBefore.Equal(rec.Enqueued.Add(2*time.Second)) {
			t.Fatalf("%s started %s, enqueued %s, not before %s: earlier than its delay", id, rec.Started, rec.Enqueued, rec.NotBefore)
		}
	}
	if n := fake.count("later"); n != 2 {
		t.Fatalf("%d runs, want 2", n)
	}
	settled(t, h, "later")
}

// A delayed job is waiting: `host cancel` ends it in its record, and it never runs.
func TestEngineDelayedJobCanBeCanceled(t *testing.T) {
	fake := newFake()
	h := hosttest.NewEngine(t, map[string]string{"later.sh": "# delay: 1s\necho\n"}, fake)
	c := newClient(t, h)
	ctx := context.Background()
	if err := c.Invoke(ctx, "later", "later-c", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	h.Eventually("the trigger deferred", func() bool {
		rec, err := h.Store.Get(ctx, "later-c")
		return err == nil && !rec.NotBefore.IsZero()
	})
	if canceled, err := c.Cancel(ctx, "later-c"); err != nil || canceled.Was != jobtype.Queued {
		t.Fatalf("cancel of a deferred job: %+v, %v", canceled, err)
	}
	h.WaitLog("canceled job dropped before it ran", 0)
	if n := fake.count("later"); n != 0 {
		t.Fatalf("a canceled delayed job ran %d times", n)
	}
	if rec := h.Record("later-c"); rec.Status != jobtype.Canceled {
		t.Fatalf("record %+v", rec)
	}
}

// A delayed trigger waits in the stream, not in the host: a host restarted while it waits runs
// it once, when it is due, and counts no attempt for the wait.
func TestDelaySurvivesARestart(t *testing.T) {
	h := hosttest.New(t, map[string]string{"later.sh": "# delay: 3s\necho '{\"ran\":true}'\n"})
	h.Publish(bus.RunSubject("later"), `{}`, map[string]string{bus.HeaderMsgID: "later-r"})
	ctx := context.Background()
	h.Eventually("the trigger deferred", func() bool {
		rec, err := h.Store.Get(ctx, "later-r")
		return err == nil && rec.Status == jobtype.Queued && !rec.NotBefore.IsZero()
	})
	h.Restart(5 * time.Second)
	rec := h.Record("later-r")
	if rec.Status != jobtype.Succeeded || rec.Attempts != 1 || string(rec.Result) != `{"ran":true}` || rec.Started.Before(rec.NotBefore) {
		t.Fatalf("record after the restart: %+v", rec)
	}
}
