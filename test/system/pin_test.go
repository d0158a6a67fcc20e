package system_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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

// A publisher cannot ask for an older kept deployment's code: a Deployment header no host
// signed for the message (none, or one copied from another message) is ignored, said in the
// log naming the claim, and the step runs what is served.
func TestForgedDeploymentHeaderRunsTheServedVersion(t *testing.T) {
	h := hosttest.New(t, nil, deployed)
	d1, _ := deployFiles(t, h, pinFlow(1, false), "one")
	converge(t, d1.Number, h.Host)
	d2, _ := deployFiles(t, h, pinFlow(2, false), "two")
	converge(t, d2.Number, h.Host)
	results := h.Sub(bus.ResultSubject("finish"))
	for i, sig := range []string{"", "c0ffee0c0ffee0c0ffee"} {
		hdr := map[string]string{bus.HeaderMsgID: fmt.Sprintf("forged-%d", i), bus.HeaderDeployment: fmt.Sprint(d1.Number)}
		if sig != "" {
			hdr[bus.HeaderDeploymentSig] = sig
		}
		h.Publish(bus.RunSubject("finish"), `{}`, hdr)
		m := h.Next(results)
		rec := h.Record(m.Header.Get(bus.HeaderJobID))
		if string(m.Data) != `{"v":2}` || rec.Deployment != d2.Number || rec.Version != d2.Functions["finish"].Hash {
			t.Fatalf("a step claiming deployment %d (sig %q) ran %s on deployment %d, want the served {\"v\":2} on %d", d1.Number, sig, m.Data, rec.Deployment, d2.Number)
		}
		e := h.WaitLog("ignored a Deployment header that no host signed for this message; the step runs the deployment served now", i)
		if got := e.ContextMap()["claimed_deployment"]; got != fmt.Sprint(d1.Number) {
			t.Fatalf("the warning names the claim %v, want %d", got, d1.Number)
		}
	}
}

// A version materialised for a pinned step (<data>/versions/<fn>-<hash>) is deleted once no
// kept deployment names it, at the host's next switch.
func TestPinnedVersionsAreCollected(t *testing.T) {
	h := hosttest.New(t, nil, deployed)
	ctx := context.Background()
	d1, _ := deployFiles(t, h, pinFlow(1, false), "one")
	converge(t, d1.Number, h.Host)
	results := h.Sub(bus.ResultSubject("finish"))
	h.Publish(bus.RunSubject("plan"), `{}`, map[string]string{bus.HeaderMsgID: "pinned-flow"})
	h.Eventually("plan waits", func() bool {
		r, err := h.Store.Get(ctx, "pinned-flow")
		return err == nil && r.Status == jobtype.Waiting
	})
	d2, _ := deployFiles(t, h, pinFlow(2, false), "two")
	converge(t, d2.Number, h.Host)
	c, err := client.New(ctx, h.NC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Decide(ctx, "pinned-flow", true, people.Operator("tester", "test"), ""); err != nil {
		t.Fatal(err)
	}
	if got := string(h.Next(results).Data); got != `{"v":1}` {
		t.Fatalf("the pinned step ran %s", got)
	}
	dir := filepath.Join(h.Dir, "data", "versions", "finish-"+d1.Functions["finish"].Hash)
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the pinned version was not materialised at %s: %v", dir, err)
	}
	// The retention collects deployment 1 (purged here as Collect would past 50 and 30 days).
	js, _ := jetstream.New(h.NC)
	kv, err := js.KeyValue(ctx, "agent_deployments")
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(ctx, fmt.Sprintf("d.%d", d1.Number)); err != nil {
		t.Fatal(err)
	}
	d3, _ := deployFiles(t, h, pinFlow(3, false), "three")
	converge(t, d3.Number, h.Host)
	h.Eventually("the version no kept deployment names is collected", func() bool {
		_, err := os.Stat(dir)
		return os.IsNotExist(err)
	})
}
