package host

import (
	"strconv"
	"strings"
	"unicode"

	"github.com/nats-io/nats.go"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/ids"
)

// lineage is where a trigger says its job stands in its flow. It is read from the trigger's
// headers here and nowhere else, and checked: a header is whatever its publisher wrote, and
// what is read goes into records, subjects, outputs and logs.
type lineage struct {
	flow     string // the flow's id: the header's when it is a safe id, else the job's own
	parent   string // the job whose output triggered it; "" when absent or not a safe id
	replayOf string // the job whose dead letter this replays; "" when absent or not a safe id
	hop      int    // the steps before this one; 0 when absent or not a number
	caller   string // who asked for it, as it said (Job-Caller), cleaned and bounded

	// toolDepth is how deeply the job is nested as a tool call (Tool-Depth); 0 when absent or
	// not a number: it is not a job's call.
	toolDepth int
}

// readLineage reads the lineage of job id's trigger.
func readLineage(hdr nats.Header, id string) lineage {
	l := lineage{flow: safeID(hdr.Get(bus.HeaderFlowID)), parent: safeID(hdr.Get(bus.HeaderParentJob)),
		replayOf: safeID(hdr.Get(bus.HeaderReplayOf))}
	if l.flow == "" {
		l.flow = id
	}
	if hop, err := strconv.Atoi(hdr.Get(bus.HeaderHop)); err == nil && hop > 0 {
		l.hop = hop
	}
	if d, err := strconv.Atoi(hdr.Get(bus.HeaderToolDepth)); err == nil && d > 0 {
		l.toolDepth = d
	}
	l.caller = cleanCaller(hdr.Get(bus.HeaderCaller))
	return l
}

// maxCaller bounds the caller a record keeps: a name, not a payload.
const maxCaller = 200

// cleanCaller keeps a caller's name printable and short, since it is shown in listings.
func cleanCaller(s string) string {
	s = strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) {
			return -1
		}
		return r
	}, s)
	return truncate(strings.TrimSpace(s), maxCaller)
}

// callerID is the job id a caller chose (its Nats-Msg-Id) when it is a safe id, else a new one.
func callerID(hdr nats.Header) string {
	if id := safeID(hdr.Get(bus.HeaderMsgID)); id != "" {
		return id
	}
	return ids.New()
}

func safeID(s string) string {
	if !ids.Safe.MatchString(s) {
		return ""
	}
	return s
}
