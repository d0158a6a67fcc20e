package flows_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/hooks"
	"github.com/agenthost/host/internal/host"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/join"
	"github.com/agenthost/host/internal/people"
	"github.com/agenthost/host/internal/secrets"
	"github.com/agenthost/host/internal/testkit/anthropictest"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/testkit/llmtest"
)

// TestIncident runs examples/flows/incident as its README says, on real jails and NATS: a
// signed alert is triaged; a high one is investigated by Claude Code and waits for a person
// across a host restart, then applied once with the decision; a low one is only labelled; the
// deploy's files are checked one job each and joined by report once, in order, across a restart
// in the middle of the gathering; and with two hosts the join and the approval still act once.
func TestIncident(t *testing.T) {
	if _, err := exec.LookPath("/usr/bin/claude"); err != nil {
		t.Skip("SKIPPED LOUDLY: Claude Code is not installed at /usr/bin/claude; scripts/setup installs it")
	}
	const diagnosis = "The new orders index migration locks the orders table; rolling back to v41 would help."
	api, err := anthropictest.Start(func(anthropictest.Request) string { return diagnosis })
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	g := newGate()
	t.Cleanup(func() { g.release(); g.srv.Close() })

	files := folder(t, "incident")
	// Where the model API is in this test: a local server, serving TLS under api.anthropic.com
	// with a certificate the host's proxy is told to trust; the proxy pins the name to it.
	id, err := llmtest.NewTLSIdentity(t.TempDir(), "api.anthropic.com")
	if err != nil {
		t.Fatal(err)
	}
	apiAddr, err := api.ServeTLS(id.Cert)
	if err != nil {
		t.Fatal(err)
	}
	files["investigate.ts"] = replaceOnce(t, files["investigate.ts"], "// network: proxy api.anthropic.com\n",
		"// network: proxy api.anthropic.com\n// env: CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1\n")
	// The test holds a file's check at its start until it lets it go (gate), to restart the host
	// while the join has gathered only some of the checks, and to have two hosts share them: at
	// most two checks run at once on a host, so one holding two leaves the rest to the other.
	files["check.py"] = replaceOnce(t, files["check.py"], "# sandbox\n", "# sandbox\n# concurrency: 2\n# network: host\n# env: GATE="+g.srv.URL+"\n")
	files["check.py"] = replaceOnce(t, files["check.py"], "def main(incident: str, path: str):\n",
		"def main(incident: str, path: str):\n    gate(path)\n") + gatePy

	// The web face at one address for the whole test (the approval links name it), serving
	// whichever host is the current one.
	var face atomic.Pointer[http.Handler]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*face.Load()).ServeHTTP(w, r) }))
	defer srv.Close()
	tweak := func(c *app.Config) {
		c.Hooks = []hooks.Source{{Name: "incident", Auth: hooks.HMAC, Secret: "incident-hook"}}
		c.AllowNetworkHost = []string{"check"}
		c.EgressCAFiles = []string{id.CAFile}
		c.EgressResolve = map[string]netip.AddrPort{"api.anthropic.com": apiAddr}
		c.ApprovalURL = srv.URL
	}
	h := hosttest.New(t, files, tweak)
	serveFace := func() { web := h.Web(); face.Store(&web) }
	serveFace()
	ctx := context.Background()
	js, err := jetstream.New(h.NC)
	if err != nil {
		t.Fatal(err)
	}
	// As `host secrets set --hook incident-hook` and `host secrets set anthropic-key` store them.
	const hookKey = "incident-signing-key"
	hookKeys, err := secrets.BindHookKeys(ctx, js, h.Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := hookKeys.Set(ctx, "incident-hook", json.RawMessage(`"`+hookKey+`"`)); err != nil {
		t.Fatal(err)
	}
	h.SetSecret("anthropic-key", `"sk-ant-incident-test-key"`)
	joins, err := join.Open(ctx, js, 0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(ctx, h.NC)
	if err != nil {
		t.Fatal(err)
	}

	deliver := func(id string, body []byte) {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+"/hooks/incident", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", id)
		mac := hmac.New(sha256.New, []byte(hookKey))
		mac.Write(body)
		req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("delivery %s: %d", id, resp.StatusCode)
		}
	}
	alert := func(id, severity string, changed ...string) []byte {
		b, _ := json.Marshal(map[string]any{
			"incident": id, "service": "checkout", "severity": severity,
			"title":       "checkout 5xx rate above 5%",
			"description": "Error rate rose from 0.1% to 7% within two minutes of the deploy.",
			"deploy":      map[string]any{"version": "v42", "previous": "v41", "files": changed},
		})
		return b
	}
	announced := h.Sub(bus.ApprovalSubject("investigate"))
	applied := h.Sub(bus.ResultSubject("apply"))
	labelled := h.Sub(bus.ResultSubject("label"))
	reported := h.Sub(bus.ResultSubject("report"))
	start := time.Now()

	// 1 and 3. A high alert of a deploy that changed four files; the second file's check is held.
	changed := []string{"api/orders.py", "db/migrations/0042_orders_index.sql", "config/limits.yaml", "docs/runbook.md"}
	g.hold(changed[1])
	deliver("alert-1", alert("INC-1", "critical", changed...))
	ev := hosttest.Decode[host.ApprovalEvent](t, h.Next(announced).Data)
	flow := ev.FlowID
	var proposal map[string]any
	if err := json.Unmarshal(ev.Result, &proposal); err != nil || ev.Function != "investigate" || proposal["incident"] != "INC-1" ||
		proposal["diagnosis"] != diagnosis || proposal["action"] != "rollback" || proposal["to"] != "v41" ||
		!strings.HasPrefix(ev.ApproveURL, srv.URL+"/approvals/"+ev.JobID+"?") {
		t.Fatalf("the approval announced: %+v (%v)", ev, err)
	}
	for _, r := range api.Requests() {
		if r.Path == "/v1/messages" && r.Header.Get("X-Api-Key") != "sk-ant-incident-test-key" {
			t.Fatalf("the model API got x-api-key %q; want the sealed key, put in by the proxy", r.Header.Get("X-Api-Key"))
		}
	}
	if reqs := api.Requests(); len(reqs) == 0 || !strings.Contains(reqs[len(reqs)-1].Text(), "db/migrations/0042_orders_index.sql") {
		t.Fatalf("the model was not asked about the deploy's files: %d requests", len(reqs))
	}
	g.wait(t, changed[1])
	// The join has the triage and three of the four checks: half gathered.
	h.Eventually("report has gathered triage and 3 of 4 checks", func() bool {
		st, ok, err := joins.Get(ctx, "report", flow)
		return err == nil && ok && st.Missing() == "check (3 of 4 items)"
	})
	if n := stepCounts(t, h, flow); n["report"] != 0 || n["apply"] != 0 || n["label"] != 0 {
		t.Fatalf("before the decision and the last check: %v", n)
	}
	// Its record says waiting once the announcement is out.
	h.Eventually("investigate's record says waiting", func() bool {
		rec, err := h.Store.Get(ctx, ev.JobID)
		return err == nil && rec.Status == jobtype.Waiting
	})
	t.Logf("INC-1 waits for a decision and its join for one check after %s; restarting the host", time.Since(start).Round(time.Millisecond))

	// The restart: the held check is handed back at the drain deadline, the approval and the
	// half-gathered join wait in NATS for the host started again on the same data.
	h.Restart(3 * time.Second)
	serveFace()
	if rec, err := h.Store.Get(ctx, ev.JobID); err != nil || rec.Status != jobtype.Waiting {
		t.Fatalf("investigate after the restart: %+v, %v", rec, err)
	}
	if st, ok, err := joins.Get(ctx, "report", flow); err != nil || !ok || st.Missing() != "check (3 of 4 items)" {
		t.Fatalf("the join after the restart: %+v (%v, %v)", st, ok, err)
	}

	// The proposal is staged (approve: ... stage): announced, but not yet the volume's head, even
	// after the restart.
	if len(ev.Staged) != 1 || ev.Staged[0].Volume != "repo-checkout" || ev.Staged[0].NAdded != 2 ||
		!slices.Contains(ev.Staged[0].Added, "VERSION") {
		t.Fatalf("the announcement's staged volumes: %+v", ev.Staged)
	}
	if slices.Contains(h.VolumeNames(nil), "repo-checkout") {
		t.Fatal("repo-checkout has a head before the approval")
	}
	// Approved through the signed link: a GET only asks (and shows the staged diff), the POST decides.
	if status, body := get(t, ev.ApproveURL); status != http.StatusOK || !strings.Contains(body, "Approve job "+ev.JobID) ||
		!strings.Contains(body, `data-path="VERSION"`) || !strings.Contains(body, "&#43;v41") {
		t.Fatalf("GET of the approve link: %d %s", status, body)
	}
	if status, body, _ := hosttest.Post(t, ev.ApproveURL, url.Values{"comment": {"roll it back"}}.Encode(),
		map[string]string{"Content-Type": "application/x-www-form-urlencoded"}); status != http.StatusOK || !strings.Contains(body, "approved") {
		t.Fatalf("POST of the approve link: %d %s", status, body)
	}
	m := h.Next(applied)
	// The approved proposal is the head of the service's repository volume.
	if got := h.ReadVolume(nil, "repo-checkout", "VERSION"); got != "v41\n" {
		t.Fatalf("repo-checkout's VERSION after the approval: %q", got)
	}
	if got := h.ReadVolume(nil, "repo-checkout", "incidents/INC-1.md"); !strings.HasPrefix(got, "# INC-1: checkout 5xx rate above 5%\n") ||
		!strings.HasSuffix(got, "Proposed: roll checkout back from v42 to v41.\n") {
		t.Fatalf("repo-checkout's incidents/INC-1.md after the approval: %q", got)
	}
	res := hosttest.Decode[map[string]any](t, m.Data)
	if m.Header.Get(bus.HeaderFlowID) != flow || res["incident"] != "INC-1" || res["done"] != "rollback checkout to v41" ||
		!strings.Contains(res["approved_by"].(string), "a signed link") || res["comment"] != "roll it back" {
		t.Fatalf("apply: %s", m.Data)
	}

	// The held check goes on, on the restarted host: report runs once, with every check in
	// the order of the files.
	g.release()
	m = h.Next(reported)
	report := hosttest.Decode[incidentReport](t, m.Data)
	if m.Header.Get(bus.HeaderFlowID) != flow || report.Incident != "INC-1" || !slices.Equal(report.Files, changed) ||
		!slices.Equal(report.Risky, changed[:3]) || !strings.Contains(report.Summary, "4 files changed by v42, 3 worth a look") {
		t.Fatalf("report: %s", m.Data)
	}
	steps := flowRecords(t, h, flow)
	if n := stepCounts(t, h, flow); n["triage"] != 1 || n["investigate"] != 1 || n["apply"] != 1 || n["check"] != 4 || n["report"] != 1 || n["label"] != 0 {
		t.Fatalf("INC-1 ran %v", n)
	}
	// The held check was stopped by the restart and ran again on the restarted host; the others
	// ran once.
	recs, err := h.Store.List(ctx, func(r *jobs.Record) bool { return r.FlowID == flow && r.Function == "check" })
	if err != nil {
		t.Fatal(err)
	}
	again := 0
	for _, r := range recs {
		if r.Status != jobtype.Succeeded {
			t.Fatalf("check %s: %s %s", r.ID, r.Status, r.Error)
		}
		if r.Attempts > 1 {
			again++
		}
	}
	if again != 1 {
		t.Fatalf("%d checks ran more than once, want the one the restart stopped", again)
	}
	if inv := steps["investigate"]; inv.Status != jobtype.Succeeded || inv.Approval == nil || inv.Approval.Comment != "roll it back" {
		t.Fatalf("investigate's record: %+v", inv)
	}
	t.Logf("INC-1 done after %s", time.Since(start).Round(time.Millisecond))

	// 2. A low alert: labelled, not investigated; its one file's check is still joined.
	deliver("alert-2", alert("INC-2", "warning", "README.md"))
	m = h.Next(labelled)
	low := m.Header.Get(bus.HeaderFlowID)
	if res := hosttest.Decode[map[string]any](t, m.Data); res["incident"] != "INC-2" || res["queue"] != "checkout-oncall" ||
		!slices.Equal(toStrings(res["labels"]), []string{"incident", "service:checkout", "severity:low"}) {
		t.Fatalf("label: %s", m.Data)
	}
	m = h.Next(reported)
	if r := hosttest.Decode[incidentReport](t, m.Data); m.Header.Get(bus.HeaderFlowID) != low || r.Incident != "INC-2" ||
		!slices.Equal(r.Files, []string{"README.md"}) || len(r.Risky) != 0 {
		t.Fatalf("INC-2's report: %s", m.Data)
	}
	flowRecords(t, h, low) // every step's final record
	if n := stepCounts(t, h, low); n["label"] != 1 || n["investigate"] != 0 || n["apply"] != 0 || n["check"] != 1 || n["report"] != 1 {
		t.Fatalf("INC-2 ran %v", n)
	}
	t.Logf("INC-2 done after %s", time.Since(start).Round(time.Millisecond))

	// 4. Two hosts on one NATS: the checks of one flow run on both (two held on one host leave
	// the others to the other one), either may take the decision, and the join and the approval
	// still act once.
	h.AddHost(t, tweak)
	many := []string{"api/orders.py", "api/cart.py", "api/tests/test_cart.py", "config/limits.yaml", "web/checkout.ts", "CHANGELOG.md"}
	g.hold(many[0], many[1])
	deliver("alert-3", alert("INC-3", "high", many...))
	ev = hosttest.Decode[host.ApprovalEvent](t, h.Next(announced).Data)
	third := ev.FlowID
	if ev.Function != "investigate" || third == flow || third == low {
		t.Fatalf("INC-3's approval: %+v", ev)
	}
	g.wait(t, many[0], many[1])
	h.Eventually("report has gathered triage and 4 of 6 checks", func() bool {
		st, ok, err := joins.Get(ctx, "report", third)
		return err == nil && ok && st.Missing() == "check (4 of 6 items)"
	})
	g.release()
	h.Eventually("investigate's record says waiting", func() bool {
		rec, err := h.Store.Get(ctx, ev.JobID)
		return err == nil && rec.Status == jobtype.Waiting
	})
	if done, err := c.Decide(ctx, ev.JobID, true, people.Operator("ada", "test"), "ship the rollback"); err != nil || done.Status != jobtype.Succeeded {
		t.Fatalf("decide: %+v, %v", done, err)
	}
	m = h.Next(applied)
	if res := hosttest.Decode[map[string]any](t, m.Data); m.Header.Get(bus.HeaderFlowID) != third || res["approved_by"] != "ada" || res["comment"] != "ship the rollback" {
		t.Fatalf("INC-3's apply: %s", m.Data)
	}
	m = h.Next(reported)
	report = hosttest.Decode[incidentReport](t, m.Data)
	if m.Header.Get(bus.HeaderFlowID) != third || !slices.Equal(report.Files, many) ||
		!slices.Equal(report.Risky, []string{"api/orders.py", "api/cart.py", "config/limits.yaml", "web/checkout.ts"}) {
		t.Fatalf("INC-3's report: %s", m.Data)
	}
	flowRecords(t, h, third) // every step's final record
	if n := stepCounts(t, h, third); n["triage"] != 1 || n["investigate"] != 1 || n["apply"] != 1 || n["check"] != len(many) || n["report"] != 1 {
		t.Fatalf("INC-3 ran %v", n)
	}
	byHost := stepHosts(t, h, third)
	if len(byHost["check"]) != 2 {
		t.Fatalf("INC-3's checks ran on %v, want both hosts", byHost["check"])
	}
	t.Logf("INC-3 done after %s; hosts by step: %v", time.Since(start).Round(time.Millisecond), byHost)
	// Nothing more came: no second apply or report of any flow.
	for _, ch := range []<-chan *nats.Msg{applied, reported} {
		select {
		case m := <-ch:
			t.Fatalf("a step ran again: %s %s", m.Subject, m.Data)
		default:
		}
	}
}

// gatePy is appended to check.py by the test: gate(path) waits for the test's word on path.
const gatePy = `

def gate(path):
    # The test's: hold this file's check until the test lets it go.
    import os, urllib.parse, urllib.request
    urllib.request.urlopen(os.environ["GATE"] + "?path=" + urllib.parse.quote(path), timeout=600).read()
`

// gate is an HTTP server a jailed job asks before it goes on: it answers at once, except for a
// held path, which it answers once released (a job stopped meanwhile leaves it). arrived says
// which held path was asked for.
type gate struct {
	srv     *httptest.Server
	mu      sync.Mutex
	held    map[string]chan struct{}
	arrived chan string
}

func newGate() *gate {
	g := &gate{held: map[string]chan struct{}{}, arrived: make(chan string, 16)}
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.Query().Get("path")
		g.mu.Lock()
		open := g.held[path]
		g.mu.Unlock()
		if open != nil {
			select {
			case g.arrived <- path:
			default:
			}
			select {
			case <-open:
			case <-r.Context().Done():
				return
			}
		}
		w.Write([]byte("go"))
	}))
	return g
}

func (g *gate) hold(paths ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range paths {
		g.held[p] = make(chan struct{})
	}
}

// wait waits until a check asked for each of paths (held ones).
func (g *gate) wait(t *testing.T, paths ...string) {
	t.Helper()
	want := map[string]bool{}
	for _, p := range paths {
		want[p] = true
	}
	for len(want) > 0 {
		select {
		case p := <-g.arrived:
			delete(want, p)
		case <-time.After(60 * time.Second):
			t.Fatalf("no check of %v asked the gate within 60s", want)
		}
	}
}

// release lets every held path go.
func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for p, open := range g.held {
		close(open)
		delete(g.held, p)
	}
}

func replaceOnce(t *testing.T, s, old, new string) string {
	t.Helper()
	if !strings.Contains(s, old) {
		t.Fatalf("the example no longer has %q", old)
	}
	return strings.Replace(s, old, new, 1)
}

// incidentReport is report's result.
type incidentReport struct {
	Incident string
	Files    []string
	Risky    []string
	Summary  string
}

// stepCounts is how many jobs each function ran in flow.
func stepCounts(t *testing.T, h *hosttest.H, flow string) map[string]int {
	t.Helper()
	recs, err := h.Store.List(context.Background(), func(r *jobs.Record) bool { return r.FlowID == flow })
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, r := range recs {
		n[r.Function]++
	}
	return n
}

// stepHosts is which hosts ran each function's jobs in flow.
func stepHosts(t *testing.T, h *hosttest.H, flow string) map[string][]string {
	t.Helper()
	recs, err := h.Store.List(context.Background(), func(r *jobs.Record) bool { return r.FlowID == flow })
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, r := range recs {
		if !slices.Contains(out[r.Function], r.Host) {
			out[r.Function] = append(out[r.Function], r.Host)
		}
	}
	for _, hosts := range out {
		slices.Sort(hosts)
	}
	return out
}

func get(t *testing.T, link string) (int, string) {
	t.Helper()
	resp, err := http.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}
