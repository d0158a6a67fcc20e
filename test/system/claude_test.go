package system_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/testkit/anthropictest"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// The seed's Claude Code template, run as written with the real Claude Agent SDK and Claude
// Code against a local server that speaks the Messages API: the second run resumes the first
// run's session because .claude lives in a volume.
func TestClaudeTemplateResumesItsSession(t *testing.T) {
	if _, err := exec.LookPath("/usr/bin/claude"); err != nil {
		t.Skip("SKIPPED LOUDLY: Claude Code is not installed at /usr/bin/claude; scripts/setup installs it (npm install -g @anthropic-ai/claude-code)")
	}
	api, err := anthropictest.Start(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	src, err := os.ReadFile("../../functions/claude.ts")
	if err != nil {
		t.Fatal(err)
	}
	// The template as written, plus where its model API is: the test's server on this
	// machine's loopback, which only the host network reaches.
	// The host network has no proxy to seal with, so without claude.ts's sealed env: line: the
	// key is the argument, as in the template (the sealed turn is TestSealedKeysInTheRealAgents's).
	script := strings.Replace(string(src), "// env: ANTHROPIC_API_KEY=$sealed:anthropic.apiKey@api.anthropic.com\n", "", 1)
	if script == string(src) {
		t.Fatal("claude.ts no longer seals ANTHROPIC_API_KEY for api.anthropic.com")
	}
	script = strings.Replace(script, "// volume: claude .claude\n",
		"// volume: claude .claude\n// env: ANTHROPIC_BASE_URL="+api.URL+"\n// env: CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1\n// network: host\n", 1)
	h := hosttest.New(t, map[string]string{"claude.ts": script}, func(c *app.Config) { c.AllowNetworkHost = []string{"claude"} })
	h.SetSecret("anthropic", `{"apiKey":"sk-ant-test-key-0123456789"}`)

	first := hosttest.Decode[map[string]any](t, h.Call("claude", `{"anthropic":"$secret:anthropic"}`).Data)
	if first["is_resume"] != false || first["new_session_id"] == nil || first["new_session_id"] == "" ||
		!strings.Contains(first["response"].(string), "What is the fastest OSS workflow engine?") {
		t.Fatalf("first run: %v", first)
	}
	second := hosttest.Decode[map[string]any](t, h.Call("claude", `{"anthropic":"$secret:anthropic"}`).Data)
	if second["is_resume"] != true || second["previous_session_id"] != first["new_session_id"] || second["prompt"] != "What did I ask you before?" {
		t.Fatalf("second run: %v (first: %v)", second, first)
	}
	// The server saw the earlier turns replayed in the resumed session.
	var resumed bool
	for _, r := range api.Requests() {
		if r.LastUserText() == "What did I ask you before?" && strings.Contains(r.Text(), "What is the fastest OSS workflow engine?") &&
			strings.Contains(r.Text(), "You said: What is the fastest OSS workflow engine?") {
			resumed = true
		}
		if key := r.Header.Get("X-Api-Key"); key != "" && key != "sk-ant-test-key-0123456789" {
			t.Fatalf("the API saw key %q", key)
		}
	}
	if !resumed {
		for _, r := range api.Requests() {
			t.Logf("%s %q", r.Path, r.LastUserText())
		}
		t.Fatal("no request replayed the first run's turns")
	}
	if strings.Contains(h.ReadVolume(nil, "claude", "session-id.txt"), "sk-ant") {
		t.Fatal("the volume holds the key")
	}
}
