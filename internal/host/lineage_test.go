package host

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/agenthost/host/internal/bus"
)

// What a trigger's headers say of its flow is read in one place and checked there: every
// reader (a delivery, a forwarded call, an unknown function's error event) gets the same.
func TestReadLineage(t *testing.T) {
	for _, c := range []struct {
		name string
		hdr  map[string]string
		want lineage
	}{
		{"none", nil, lineage{flow: "job1"}},
		{"a flow's step", map[string]string{bus.HeaderFlowID: "flow-1", bus.HeaderParentJob: "job0", bus.HeaderHop: "3"},
			lineage{flow: "flow-1", parent: "job0", hop: 3}},
		{"a replay", map[string]string{bus.HeaderReplayOf: "dead-1"}, lineage{flow: "job1", replayOf: "dead-1"}},
		{"unsafe flow", map[string]string{bus.HeaderFlowID: "a.b.>"}, lineage{flow: "job1"}},
		{"unsafe parent", map[string]string{bus.HeaderParentJob: "x y"}, lineage{flow: "job1"}},
		{"unsafe replay", map[string]string{bus.HeaderReplayOf: "../x"}, lineage{flow: "job1"}},
		{"negative hop", map[string]string{bus.HeaderHop: "-5"}, lineage{flow: "job1"}},
		{"hop not a number", map[string]string{bus.HeaderHop: "many"}, lineage{flow: "job1"}},
	} {
		hdr := nats.Header{}
		for k, v := range c.hdr {
			hdr.Set(k, v)
		}
		if got := readLineage(hdr, "job1"); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	hdr := nats.Header{}
	hdr.Set(bus.HeaderMsgID, "my-key")
	if id := callerID(hdr); id != "my-key" {
		t.Errorf("caller's id %q, want my-key", id)
	}
	hdr.Set(bus.HeaderMsgID, "not safe!")
	if id := callerID(hdr); id == "not safe!" || safeID(id) == "" {
		t.Errorf("an unsafe caller id gave %q", id)
	}
}
