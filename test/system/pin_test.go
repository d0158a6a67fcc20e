package system_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/people"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// pinFlow is a flow: plan waits for an approval, then finish runs; each says its version.
func pinFlow(v int, latest bool) map[string]string {
	pin := ""
	if latest {
		pin = "# pin: latest\n"
	}
	return map[string]string{
		"plan.py":   "# approve\n# next: agent.run.finish\ndef main():\n    return {\"plan\": 1}\n",
		"finish.py": pin + fmt.Sprintf("def main(**kw):\n    return {\"v\": %d}\n", v),
		"other.py":  fmt.Sprintf("def main():\n    return {\"other\": %d}\n", v),
	}
}

// A flow started on deployment 1 that waits on an approval while deployment 2 is stored runs its
// next step on deployment 1's code, while a new flow runs 2's; the records say which.
func TestFlowKeepsItsDeployment(t *testing.T) {
	h := hosttest.New(t, nil, deployed)
	ctx := context.Background()
	d1, _ := deployFiles(t, h, pinFlow(1, false), "one")
	converge(t, d1.Number, h.Host)
	results := h.Sub(bus.ResultSubject("finish"))
	c, err := client.New(ctx, h.NC)
	if err != nil {
		t.Fatal(err)
	}
	start := func(id string) {
		h.Publish(bus.RunSubject("plan"), `{}`, map[string]string{bus.HeaderMsgID: id})
		h.Eventually("plan "+id+" waits", func() bool {
			r, err := h.Store.Get(ctx, id)
			return err == nil && r.Status == jobtype.Waiting
		})
	}
	start("old-flow")
	d2, _ := deployFiles(t, h, pinFlow(2, false), "two")
	converge(t, d2.Number, h.Host)
	start("new-flow")

	approve := func(id string) (string, int, string) {
		if _, err := c.Decide(ctx, id, true, people.Operator("tester", "test"), ""); err != nil {
			t.Fatal(err)
		}
		m := h.Next(results)
		rec := h.Record(m.Header.Get(bus.HeaderJobID))
		return string(m.Data), rec.Deployment, rec.Version
	}
	got, dep, ver := approve("old-flow")
	if got != `{"v":1}` || dep != d1.Number || ver != d1.Functions["finish"].Hash {
		t.Fatalf("the flow started on deployment 1 ran its next step as %s (deployment %d, version %s), want {\"v\":1} on 1 (%s)", got, dep, ver, d1.Functions["finish"].Hash)
	}
	got, dep, ver = approve("new-flow")
	if got != `{"v":2}` || dep != d2.Number || ver != d2.Functions["finish"].Hash {
		t.Fatalf("a flow started on deployment 2 ran %s (deployment %d, version %s)", got, dep, ver)
	}
	if rec := h.Record("old-flow"); rec.Deployment != d1.Number || rec.Version != d1.Functions["plan"].Hash {
		t.Fatalf("the first job's record: deployment %d version %s", rec.Deployment, rec.Version)
	}

	// A flow whose deployment is no longer kept fails its next step, naming it.
	start("gone-flow")
	errs := h.Sub(bus.ErrorSubject("finish"))
	d2b, _ := deployFiles(t, h, pinFlow(5, false), "five")
	converge(t, d2b.Number, h.Host)
	js, err := jetstream.New(h.NC)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "agent_deployments")
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(ctx, fmt.Sprintf("d.%d", d2.Number)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Decide(ctx, "gone-flow", true, people.Operator("tester", "test"), ""); err != nil {
		t.Fatal(err)
	}
	if ev := string(h.Next(errs).Data); !strings.Contains(ev, fmt.Sprintf("started under deployment %d, which is no longer kept", d2.Number)) {
		t.Fatalf("the step of a collected deployment: %s", ev)
	}

	// pin: latest runs the current code in an old flow.
	d3, _ := deployFiles(t, h, pinFlow(3, true), "three, latest")
	converge(t, d3.Number, h.Host)
	start("latest-flow-on-3")
	d4, _ := deployFiles(t, h, pinFlow(4, true), "four, latest")
	converge(t, d4.Number, h.Host)
	if got, dep, _ := approve("latest-flow-on-3"); got != `{"v":4}` || dep != d3.Number {
		t.Fatalf("pin: latest in a flow of deployment %d ran %s (recorded deployment %d), want the current code", d3.Number, got, dep)
	}
}
