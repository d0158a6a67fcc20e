package mcp_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/host/internal/anthropictest"
	"github.com/agenthost/host/internal/hosttest"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
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
