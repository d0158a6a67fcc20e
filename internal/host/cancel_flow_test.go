package host_test

import (
	"context"
	"strings"
	"testing"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// `host cancel --flow`: a running step is stopped, a waiting one (here a delay) never runs,
// and a step of the flow triggered afterwards is canceled when it is taken, not run.
func TestEngineCancelFlow(t *testing.T) {
	started := make(chan string, 4)
	fake := newFake().on("a", func(ctx context.Context, j *jobtype.Job) *jobtype.Outcome {
		started <- j.ID
		<-ctx.Done()
		return &jobtype.Outcome{Err: context.Cause(ctx), ExitCode: -1}
	})
	h := hosttest.NewEngine(t, map[string]string{"a.sh": "echo\n", "later.sh": "# delay: 1h\necho\n", "b.sh": "echo\n"}, fake)
	c := newClient(t, h)
	ctx := context.Background()
	flow := map[string]string{bus.HeaderFlowID: "flow-x"}
	h.Publish(bus.RunSubject("a"), `{}`, map[string]string{bus.HeaderMsgID: "flow-x"})
	<-started
	h.Publish(bus.RunSubject("later"), `{}`, map[string]string{bus.HeaderMsgID: "later-x", bus.HeaderFlowID: "flow-x"})
	h.Eventually("the delayed step waits", func() bool {
		rec, err := h.Store.Get(ctx, "later-x")
		return err == nil && !rec.NotBefore.IsZero()
	})
	done, err := c.CancelFlow(ctx, "flow-x", "the test")
	if err != nil || len(done.Canceled) != 2 || len(done.Failed) != 0 {
		t.Fatalf("cancel flow: %+v, %v", done, err)
	}
	was := map[string]jobtype.Status{}
	for _, rec := range done.Canceled {
		was[rec.ID] = rec.Was
	}
	if was["flow-x"] != jobtype.Running || was["later-x"] != jobtype.Queued {
		t.Fatalf("canceled %v", was)
	}
	// A step of the flow that comes up afterwards (as an output of a step that ended just
	// before the cancel would) is canceled, on whichever host takes it.
	h.Publish(bus.RunSubject("b"), `{}`, map[string]string{bus.HeaderMsgID: "b-x", bus.HeaderFlowID: flow[bus.HeaderFlowID]})
	rec := h.Record("b-x")
	if rec.Status != jobtype.Canceled || !strings.Contains(rec.Error, "flow flow-x was canceled by the test") || fake.count("b") != 0 {
		t.Fatalf("a step after the cancel: %+v, ran %d times", rec, fake.count("b"))
	}
	for _, id := range []string{"flow-x", "later-x"} {
		if rec := h.Record(id); rec.Status != jobtype.Canceled {
			t.Fatalf("%s: %+v", id, rec)
		}
	}
	if _, err := c.CancelFlow(ctx, "no-such-flow", "the test"); err == nil || !strings.Contains(err.Error(), "no job of it is recorded") {
		t.Fatalf("cancel of an unknown flow: %v", err)
	}
}
