package mcp_test

import (
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/anthropictest"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// Claude Code as the client: `claude -p` with an MCP config pointing at the host, against the
// local Messages API server, which answers with a tool_use of the host's wordcount; the host
// runs it in a jail, and the server receives the tool_result with its output.
func TestClaudeCodeClient(t *testing.T) {
	claude, err := exec.LookPath("claude")
	if err != nil {
		t.Skip("SKIPPED LOUDLY: Claude Code (claude) is not installed; scripts/setup installs it")
	}
	if _, err := exec.LookPath("bun"); err != nil {
		t.Skip("SKIPPED LOUDLY: bun is not installed; scripts/setup installs it (wordcount.ts runs on it)")
	}
	files := examples(t, "wordcount.ts")
	files["wordcount.ts"] = "// tool\n" + files["wordcount.ts"]
	h := hosttest.New(t, files)
	srv := serve(t, h, nil)

	const tool = "mcp__host__wordcount"
	api, err := anthropictest.StartResponder(func(r anthropictest.Request) anthropictest.Answer {
		if res, ok := r.ToolResults()["toolu_wc_1"]; ok {
			return anthropictest.Answer{Text: "The tool said: " + res.Text}
		}
		if slices.Contains(r.ToolNames(), tool) {
			return anthropictest.Answer{ToolUse: &anthropictest.ToolUse{ID: "toolu_wc_1", Name: tool, Input: map[string]any{"text": "to be or not to be", "top": 2}}}
		}
		return anthropictest.Answer{Text: "ok"}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()

	home := t.TempDir()
	config, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"host": map[string]any{
		"type": "http", "url": srv.URL + "/mcp", "headers": map[string]string{"Authorization": "Bearer " + testToken},
	}}})
	configFile := filepath.Join(home, "mcp.json")
	if err := os.WriteFile(configFile, config, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, claude, "-p", "Count the words of: to be or not to be", "--mcp-config", configFile, "--strict-mcp-config",
		"--allowedTools", tool, "--output-format", "json")
	cmd.Dir = home
	cmd.Env = append(os.Environ(), "HOME="+home, "ANTHROPIC_BASE_URL="+api.URL, "ANTHROPIC_API_KEY=sk-ant-test",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1",
		// The host's tools in the request itself, not behind Claude Code's tool search, so that
		// the fake model can call one at once.
		"ENABLE_TOOL_SEARCH=false")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("claude -p: %v\n%s", err, out)
	}

	var sent *anthropictest.ToolResult
	for _, r := range api.Requests() {
		if res, ok := r.ToolResults()["toolu_wc_1"]; ok {
			sent = &res
		}
	}
	if sent == nil {
		for _, r := range api.Requests() {
			t.Logf("request offered tools %v", r.ToolNames())
		}
		t.Fatalf("Claude Code never sent a tool_result for the wordcount call; it printed:\n%s", out)
	}
	var result struct {
		Words int
		Top   []struct {
			Word  string
			Count int
		}
	}
	if sent.IsError || json.Unmarshal([]byte(strings.TrimSpace(firstJSON(sent.Text))), &result) != nil ||
		result.Words != 6 || len(result.Top) != 2 || result.Top[0].Word != "be" || result.Top[0].Count != 2 {
		t.Errorf("tool_result = %+v, want wordcount's result for 6 words, top be×2", sent)
	}
	if !strings.Contains(string(out), "The tool said:") {
		t.Errorf("claude -p did not print the answer made from the tool's result:\n%s", out)
	}
	// The call was a job of wordcount, jailed, whose record names Claude Code.
	recs, err := h.Store.List(ctx, func(r *jobs.Record) bool { return r.Function == "wordcount" })
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, rec := range recs {
		found = true
		if rec.Status != jobtype.Succeeded || !strings.HasPrefix(rec.Caller, "mcp claude-code/") {
			t.Errorf("job %s: %s by %q, want succeeded, by Claude Code", rec.ID, rec.Status, rec.Caller)
		}
	}
	if !found {
		t.Error("no job of wordcount was recorded")
	}
}

// firstJSON is the first line of s that is a JSON object: the tool_result's text block.
func firstJSON(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "{") {
			return l
		}
	}
	return s
}

// loopbackName is a name of this machine, other than localhost, that resolves to a loopback
// address: a jailed job's HTTP client sends it through the egress proxy (NO_PROXY names
// localhost and 127.0.0.1 only), which may dial it once loopback is permitted.
func loopbackName(t *testing.T) string {
	t.Helper()
	b, _ := os.ReadFile("/etc/hosts")
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.HasPrefix(f[0], "127.") {
			continue
		}
		for _, name := range f[1:] {
			if name != "localhost" && !strings.HasPrefix(name, "#") {
				if addrs, err := net.LookupHost(name); err == nil && len(addrs) > 0 && strings.HasPrefix(addrs[0], "127.") {
					return name
				}
			}
		}
	}
	t.Skip("SKIPPED LOUDLY: no name of this machine but localhost resolves to a loopback address (/etc/hosts), so a jailed job cannot reach the local Messages API through its proxy")
	return ""
}

// The Claude Code template as written, tools: and all: Claude Code in the jail, through the
// Agent SDK, calls wordcount at HOST_MCP_URL; the call is a job of its own in the template's
// flow, and the model hears its result.
func TestClaudeTemplateCallsWordcount(t *testing.T) {
	if _, err := exec.LookPath("/usr/bin/claude"); err != nil {
		t.Skip("SKIPPED LOUDLY: Claude Code is not installed at /usr/bin/claude; scripts/setup installs it")
	}
	const tool = "mcp__host__wordcount"
	api, err := anthropictest.StartResponder(func(r anthropictest.Request) anthropictest.Answer {
		if res, ok := r.ToolResults()["toolu_wc_2"]; ok {
			return anthropictest.Answer{Text: "The tool said: " + res.Text}
		}
		if slices.Contains(r.ToolNames(), tool) {
			return anthropictest.Answer{ToolUse: &anthropictest.ToolUse{ID: "toolu_wc_2", Name: tool, Input: map[string]any{"text": "to be or not to be", "top": 2}}}
		}
		return anthropictest.Answer{Text: "no tool offered"}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	apiHost := strings.Replace(strings.TrimPrefix(api.URL, "http://"), "127.0.0.1", loopbackName(t), 1)
	apiURL := "http://" + apiHost
	src, err := os.ReadFile("../../functions/claude.ts")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), "// tools: wordcount\n") {
		t.Fatal("functions/claude.ts no longer declares tools: wordcount")
	}
	// The template as written, plus where its model API is, and the host's tools in the
	// request itself (not behind Claude Code's tool search), so that the fake model can call one.
	script := strings.Replace(string(src), "// volume: claude .claude\n",
		"// volume: claude .claude\n// env: ANTHROPIC_BASE_URL="+apiURL+"\n// env: CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1\n// env: ENABLE_TOOL_SEARCH=false\n// network: proxy api.anthropic.com "+apiHost+"\n", 1)
	files := examples(t, "wordcount.ts")
	files["claude.ts"] = script
	h := hosttest.New(t, files, func(c *app.Config) { c.EgressPermit = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} })
	h.SetSecret("anthropic", `{"apiKey":"sk-ant-test-key-0123456789"}`)

	reply := h.Call("claude", `{"anthropic":"$secret:anthropic"}`)
	out := hosttest.Decode[map[string]any](t, reply.Data)
	response, _ := out["response"].(string)
	if !strings.Contains(response, "The tool said:") || !strings.Contains(response, `"words":6`) {
		for _, r := range api.Requests() {
			t.Logf("request offered %v", r.ToolNames())
		}
		t.Fatalf("claude.ts answered %v; want the model's answer made from wordcount's result", out)
	}
	claudeID := reply.Header.Get(bus.HeaderJobID)
	claudeRec := h.Record(claudeID)
	recs, err := h.Store.List(ctxT(t), func(r *jobs.Record) bool { return r.Function == "wordcount" })
	if err != nil || len(recs) != 1 {
		t.Fatalf("wordcount jobs: %d, %v; want the one call", len(recs), err)
	}
	wc := recs[0]
	if wc.Status != jobtype.Succeeded || wc.FlowID != claudeRec.FlowID || wc.ParentJob != claudeID || wc.Caller != "job "+claudeID+" (claude)" {
		t.Errorf("wordcount's job: %s, flow %s (claude's %s), parent %s (claude %s), caller %q", wc.Status, wc.FlowID, claudeRec.FlowID, wc.ParentJob, claudeID, wc.Caller)
	}
}
