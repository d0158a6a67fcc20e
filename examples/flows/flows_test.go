// Package flows_test runs each example flow end to end on a real host, as its README says.
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
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/hooks"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/anthropictest"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// folder reads an example flow's functions.
func folder(t *testing.T, name string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(name)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, e := range entries {
		if e.IsDir() || strings.HasSuffix(e.Name(), ".md") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(name, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = string(b)
	}
	return files
}

func flowRecords(t *testing.T, h *hosttest.H, flow string) map[string]*jobs.Record {
	t.Helper()
	recs, err := h.Store.List(context.Background(), func(r *jobs.Record) bool { return r.FlowID == flow })
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*jobs.Record{}
	for _, r := range recs {
		// A step's outputs go out before its final record is written: a test that heard the
		// flow's last output must wait for the records that say so.
		out[r.Function] = h.Record(r.ID)
	}
	return out
}

func TestGitHubTriage(t *testing.T) {
	if _, err := exec.LookPath("/usr/bin/claude"); err != nil {
		t.Skip("SKIPPED LOUDLY: Claude Code is not installed at /usr/bin/claude; scripts/setup installs it")
	}
	api, err := anthropictest.Start(func(r anthropictest.Request) string {
		return "Summary: the reporter says the parser crashes on empty input."
	})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	files := folder(t, "github-triage")
	// Where the model API is in this test: a local server, which only the host network reaches.
	files["summarize.ts"] = strings.Replace(files["summarize.ts"], "// network: proxy api.anthropic.com\n",
		"// network: host\n// env: ANTHROPIC_BASE_URL="+api.URL+"\n// env: CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1\n", 1)
	h := hosttest.New(t, files, func(c *app.Config) {
		c.Hooks = []hooks.Source{{Name: "github", Auth: hooks.HMAC, Secret: "gh-secret"}}
		c.AllowNetworkHost = []string{"summarize"}
	})
	const hookKey = "webhook-signing-key"
	h.SetSecret("gh-secret", `"`+hookKey+`"`)
	h.SetSecret("anthropic", `{"apiKey":"sk-ant-flow-test-key"}`)
	srv := httptest.NewServer(h.Web())
	defer srv.Close()

	deliver := func(source, id string, body []byte, key string) *http.Response {
		req, _ := http.NewRequest("POST", srv.URL+"/hooks/"+source, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Event", "issues")
		req.Header.Set("X-GitHub-Delivery", id)
		if key != "" {
			mac := hmac.New(sha256.New, []byte(key))
			mac.Write(body)
			req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	issue := func(action string, n int) []byte {
		b, _ := json.Marshal(map[string]any{
			"action":     action,
			"issue":      map[string]any{"number": n, "title": "Parser crashes on empty input", "body": "It panics with an error.", "user": map[string]any{"login": "ada"}},
			"repository": map[string]any{"full_name": "acme/parser"},
		})
		return b
	}
	deliveries := h.Sub("webhook.github")
	out := h.Sub("flow.out.triage")

	// Refused, and nothing published: a forged signature, no signature, an undeclared source,
	// an oversized body.
	for _, c := range []struct {
		source, key string
		body        []byte
		want        int
	}{
		{"github", "wrong-key", issue("opened", 1), http.StatusUnauthorized},
		{"github", "", issue("opened", 1), http.StatusUnauthorized},
		{"gitlab", hookKey, issue("opened", 1), http.StatusNotFound},
		{"github", hookKey, bytes.Repeat([]byte("x"), 1<<20+1), http.StatusRequestEntityTooLarge},
	} {
		if resp := deliver(c.source, "refused", c.body, c.key); resp.StatusCode != c.want {
			t.Fatalf("%s with key %q: %d, want %d", c.source, c.key, resp.StatusCode, c.want)
		}
	}

	if resp := deliver("github", "delivery-1", issue("opened", 42), hookKey); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("signed delivery: %d", resp.StatusCode)
	}
	// The delivery id names the message within its source only (derived with the hosts' key),
	// so no other publisher can send one ahead under it.
	if m := h.Next(deliveries); m.Header.Get("X-GitHub-Delivery") != "delivery-1" || m.Header.Get("Nats-Msg-Id") == "delivery-1" ||
		m.Header.Get("Nats-Msg-Id") == "" || m.Header.Get("X-GitHub-Event") != "issues" {
		t.Fatalf("the first delivery published is %v: a refused one got through", m.Header)
	}
	m := h.Next(out)
	res := hosttest.Decode[map[string]any](t, m.Data)
	if res["number"] != float64(42) || res["repo"] != "acme/parser" || !strings.Contains(res["summary"].(string), "parser crashes") ||
		strings.Join(toStrings(res["labels"]), ",") != "bug" {
		t.Fatalf("flow.out.triage: %s", m.Data)
	}
	flow := m.Header.Get("Flow-Id")
	steps := flowRecords(t, h, flow)
	if steps["triage"] == nil || steps["summarize"] == nil || steps["triage"].Hop != 0 || steps["summarize"].Hop != 1 ||
		steps["summarize"].ParentJob != steps["triage"].ID || !contains(steps["summarize"].Outputs, "flow.out.triage") {
		t.Fatalf("flow %s records: %+v", flow, steps)
	}

	// A redelivery runs nothing twice; a later delivery acts as the barrier.
	deliver("github", "delivery-1", issue("opened", 42), hookKey)
	deliver("github", "delivery-2", issue("closed", 42), hookKey)
	if res := hosttest.Decode[map[string]any](t, h.Next(out).Data); res["skipped"] != "action closed" {
		t.Fatalf("second flow: %v", res)
	}
	recs, _ := h.Store.List(context.Background(), func(r *jobs.Record) bool { return r.Function == "triage" })
	if len(recs) != 2 {
		t.Fatalf("%d triage jobs for 2 distinct deliveries", len(recs))
	}

	// A body that is not JSON: the error event says so.
	errs := h.Sub("agent.error.triage")
	deliver("github", "delivery-3", []byte("not json"), hookKey)
	if ev := hosttest.Decode[jobs.ErrorEvent](t, h.Next(errs).Data); !strings.Contains(ev.Error, "not valid JSON") {
		t.Fatalf("non-JSON delivery: %+v", ev)
	}
}

func TestFanOutWithErrorHandler(t *testing.T) {
	h := hosttest.New(t, folder(t, "fanout-errors"))
	invoices, ships, handled := h.Sub("agent.result.invoice"), h.Sub("agent.result.ship"), h.Sub("agent.result.failures")
	h.Publish("agent.run.order", `{"id":"A-1","items":[{"price":9.5,"qty":2}],"address":"1 Main St"}`, map[string]string{"Nats-Msg-Id": "A-1"})
	h.Publish("agent.run.order", `{"id":"A-2","items":[{"price":3}]}`, map[string]string{"Nats-Msg-Id": "A-2"})
	totals := map[string]float64{}
	for range 2 {
		r := hosttest.Decode[map[string]any](t, h.Next(invoices).Data)
		totals[r["id"].(string)] = r["total"].(float64)
	}
	if totals["A-1"] != 19 || totals["A-2"] != 3 {
		t.Fatalf("invoices: %v", totals)
	}
	if r := hosttest.Decode[map[string]any](t, h.Next(ships).Data); r["label"] != "SHIP A-1 TO 1 MAIN ST" {
		t.Fatalf("ship: %v", r)
	}
	r := hosttest.Decode[map[string]any](t, h.Next(handled).Data)
	rec := r["recorded"].(map[string]any)
	if rec["function"] != "ship" || rec["flow_id"] != "A-2" || !strings.Contains(rec["error"].(string), "order A-2 has no shipping address") {
		t.Fatalf("handler: %v", r)
	}
	log := h.ReadVolume(nil, "failures", "log.jsonl")
	if strings.Count(log, "\n") != 1 || !strings.Contains(log, `"function": "ship"`) {
		t.Fatalf("failures volume: %q", log)
	}
	steps := flowRecords(t, h, "A-2")
	if steps["order"] == nil || steps["invoice"] == nil || steps["ship"] == nil || steps["failures"] == nil || steps["ship"].Status != jobtype.Failed {
		t.Fatalf("flow A-2: %+v", steps)
	}
}

func TestScheduledFlow(t *testing.T) {
	h := hosttest.New(t, folder(t, "scheduled"))
	h.AddHost(t) // two hosts serve the schedule; each tick still runs once
	reports := h.Sub("agent.result.report")
	var last float64
	for range 3 {
		r := hosttest.Decode[map[string]any](t, h.Next(reports).Data)
		seen, reported := r["ticks_seen"].(float64), r["ticks_reported"].(float64)
		if seen < reported || seen <= last {
			t.Fatalf("report %v after %v: the follow-up did not see the scheduled step's writes, or a tick ran twice", r, last)
		}
		last = seen
	}
	ticks := strings.Fields(h.ReadVolume(nil, "ticks", "log"))
	seen := map[string]bool{}
	for _, tick := range ticks {
		if seen[tick] {
			t.Fatalf("tick %s ran twice: %v", tick, ticks)
		}
		seen[tick] = true
	}
}

func toStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
