package system_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

func TestDeadLetterKeepsAndReplays(t *testing.T) {
	h := hosttest.New(t, map[string]string{"fragile.sh": "# sandbox\necho 'broken for now' >&2\nexit 4\n"})
	errs := h.Sub("agent.error.fragile")
	h.Publish("agent.run.fragile", `{"order":7}`, map[string]string{bus.HeaderMsgID: "order-7", bus.HeaderFlowID: "flow-7"})
	h.Next(errs)

	c, err := client.New(context.Background(), h.NC)
	if err != nil {
		t.Fatal(err)
	}
	dl, err := c.DeadLetters(context.Background(), "fragile")
	if err != nil {
		t.Fatal(err)
	}
	if len(dl) != 1 || dl[0].JobID != "order-7" || dl[0].Subject != "agent.run.fragile" || string(dl[0].Data) != `{"order":7}` ||
		!strings.Contains(dl[0].Error, "exited with code 4") || dl[0].Attempts != 1 || dl[0].Header.Get(bus.HeaderFlowID) != "flow-7" {
		t.Fatalf("dead letters: %+v", dl)
	}

	// Fixed, then replayed: the same payload runs again as a new job of the same flow.
	h.Write("fragile.sh", "# sandbox\ncat\n")
	h.Eventually("the fixed version is served", func() bool {
		r := h.Call("fragile", `{"probe":1}`)
		return r.Header.Get(bus.HeaderJobStatus) == "succeeded"
	})
	results := h.Sub("agent.result.fragile")
	if err := c.Replay(context.Background(), "order-7", "order-7-replay"); err != nil {
		t.Fatal(err)
	}
	m := h.Next(results)
	if m.Header.Get(bus.HeaderJobID) != "order-7-replay" || m.Header.Get(bus.HeaderFlowID) != "flow-7" || string(m.Data) != `{"order":7}` {
		t.Fatalf("replayed result: %v %s", m.Header, m.Data)
	}
	// The replay is marked both ways: the new job names the dead one, and the dead letter lists
	// the replay.
	if rec := h.Record("order-7-replay"); rec.ReplayedFrom != "order-7" {
		t.Fatalf("replayed job's record: replayed_from %q, want order-7", rec.ReplayedFrom)
	}
	// (The probes that ran the old version are dead letters too, not replayed.)
	dl, err = c.DeadLetters(context.Background(), "fragile")
	if err != nil || len(dl) < 2 || dl[0].JobID != "order-7" || !slices.Equal(dl[0].ReplayedAs, []string{"order-7-replay"}) || dl[1].ReplayedAs != nil {
		t.Fatalf("dead letters after the replay: %+v, %v; want order-7's replayed_as [order-7-replay], no others", dl, err)
	}
	if rec := h.Record("order-7"); !slices.Equal(rec.ReplayedAs, []string{"order-7-replay"}) || rec.ReplayedFrom != "" {
		t.Fatalf("dead job's record: %+v", rec)
	}
	if _, err := c.DeadLetter(context.Background(), "no-such-job"); err == nil || !strings.Contains(err.Error(), "no dead letter") {
		t.Fatalf("missing dead letter: %v", err)
	}
}
