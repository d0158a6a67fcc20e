package host_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// triageFlow is a step that branches on its result's severity (branch-all, with an else) and
// maps over its files, and the steps it leads to, which remember what they were sent.
func triageFlow(t *testing.T, result string) (*hosttest.H, *fakeRunner, func(function string) []string) {
	var mu sync.Mutex
	got := map[string][]string{}
	remember := func(_ context.Context, j *jobtype.Job) *jobtype.Outcome {
		return &jobtype.Outcome{Result: []byte(`"ok"`)}
	}
	fake := newFake().on("triage", func(context.Context, *jobtype.Job) *jobtype.Outcome {
		return &jobtype.Outcome{Result: []byte(result)}
	})
	for _, fn := range []string{"page", "label", "big", "file"} {
		fake.on(fn, func(ctx context.Context, j *jobtype.Job) *jobtype.Outcome {
			mu.Lock()
			got[fn] = append(got[fn], string(j.Payload))
			mu.Unlock()
			return remember(ctx, j)
		})
	}
	h := hosttest.NewEngine(t, map[string]string{
		"triage.sh": "# next: agent.run.page if result.severity == 'high'\n" +
			"# next: agent.run.big if size(result.files) > 2\n" +
			"# next: agent.run.label else\n" +
			"# next: agent.run.file each result.files\necho\n",
		"page.sh": "echo\n", "label.sh": "echo\n", "big.sh": "echo\n", "file.sh": "echo\n",
	}, fake)
	return h, fake, func(function string) []string {
		mu.Lock()
		defer mu.Unlock()
		out := slices.Clone(got[function])
		slices.Sort(out)
		return out
	}
}

// A result goes to every "if" edge that holds, to the "else" edges only when none did, and
// once per element to an "each" edge: an object as it is, anything else as {"item": …}, each
// a job of the same flow whose parent is the step, its trigger saying which item of how many.
func TestEngineRoutesBranchAndMap(t *testing.T) {
	h, fake, sent := triageFlow(t, `{"severity":"high","files":[{"path":"a.go"},"b.go","c.go"]}`)
	items := h.Sub(bus.RunSubject("file"))
	if reply := h.Call("triage", `{}`); reply.Header.Get(bus.HeaderJobStatus) != "succeeded" {
		t.Fatalf("triage: %v %s", reply.Header, reply.Data)
	}
	var headers []string
	for range 3 {
		m := h.Next(items)
		headers = append(headers, m.Header.Get(bus.HeaderItem)+"/"+m.Header.Get(bus.HeaderItems))
	}
	slices.Sort(headers)
	if strings.Join(headers, " ") != "0/3 1/3 2/3" {
		t.Fatalf("items' headers %v", headers)
	}
	h.Eventually("every routed step ran", func() bool { return fake.count("file") == 3 && fake.count("page") == 1 && fake.count("big") == 1 })
	settled(t, h, "file")
	if got := sent("file"); strings.Join(got, " ") != `{"item":"b.go"} {"item":"c.go"} {"path":"a.go"}` {
		t.Fatalf("the map sent %v", got)
	}
	if got := sent("page"); len(got) != 1 || !strings.Contains(got[0], `"severity":"high"`) {
		t.Fatalf("page was sent %v", got)
	}
	if n := fake.count("label"); n != 0 {
		t.Fatalf("the else edge fired %d times although an if held", n)
	}
	recs, err := h.Store.Recent(context.Background(), jobs.Filter{Function: "file"}, 0)
	if err != nil || len(recs) != 3 {
		t.Fatalf("file records %v, %v", recs, err)
	}
	for _, r := range recs {
		if parent := h.Record(r.ParentJob); parent.Function != "triage" || r.FlowID != parent.FlowID || r.Hop != 1 {
			t.Fatalf("item record %+v (parent %+v)", r, parent)
		}
	}
}

func TestEngineRoutesElse(t *testing.T) {
	h, fake, sent := triageFlow(t, `{"severity":"low","files":[]}`)
	h.Call("triage", `{}`)
	h.Eventually("the else step ran", func() bool { return fake.count("label") == 1 })
	settled(t, h, "label")
	if got := sent("label"); len(got) != 1 || got[0] != `{"severity":"low","files":[]}` {
		t.Fatalf("label was sent %v", got)
	}
	if n := fake.count("page") + fake.count("big") + fake.count("file"); n != 0 {
		t.Fatalf("%d runs of steps whose edges did not hold (an empty map makes none)", n)
	}
}

// A result the expressions cannot read fails the step for good, naming the edge and the
// expression, and routes nothing.
func TestEngineRouteFailureFailsTheStep(t *testing.T) {
	h, fake, _ := triageFlow(t, `{"files":"not a list"}`)
	errs := h.Sub(bus.ErrorSubject("triage"))
	m := nats.NewMsg(bus.CallSubject("triage"))
	m.Header.Set(bus.HeaderMsgID, "bad-route")
	reply := h.CallMsg(m, `{}`)
	if reply.Header.Get(bus.HeaderJobStatus) != "failed" || !strings.Contains(string(reply.Data), "next: agent.run.page if result.severity == 'high'") ||
		!strings.Contains(string(reply.Data), "no such key: severity") {
		t.Fatalf("reply %v %s", reply.Header, reply.Data)
	}
	h.Next(errs)
	if rec := h.Record("bad-route"); rec.Status != jobtype.Failed || rec.Attempts != 1 || slices.Contains(rec.Outputs, bus.RunSubject("file")) {
		t.Fatalf("record %+v", rec)
	}
	if n := fake.count("page") + fake.count("big") + fake.count("file") + fake.count("label"); n != 0 {
		t.Fatalf("%d steps ran after a failed route", n)
	}
}
