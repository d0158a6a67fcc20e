package system_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/testkit/anthropictest"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

const openCodeKey = "sk-ant-opencode-test-key-0123456789"

// openCodeScript is functions/opencode.ts as shipped, plus where its model API is: baseURL on
// this machine's loopback, which only the host network reaches, and extra annotations.
func openCodeScript(t *testing.T, baseURL, extra string) string {
	t.Helper()
	if _, err := exec.LookPath("/usr/bin/opencode"); err != nil {
		t.Skip("SKIPPED LOUDLY: OpenCode is not installed at /usr/bin/opencode; scripts/setup installs it (npm install -g opencode-ai@1.18.33)")
	}
	src, err := os.ReadFile("../../functions/opencode.ts")
	if err != nil {
		t.Fatal(err)
	}
	script := strings.Replace(string(src), "// network: proxy api.anthropic.com\n",
		"// network: host\n// env: ANTHROPIC_BASE_URL="+baseURL+"\n"+extra, 1)
	if script == string(src) {
		t.Fatal("opencode.ts has no `// network: proxy api.anthropic.com` line to replace")
	}
	// The host network has no proxy to seal with: the key itself, as before sealing (the
	// sealed turn is TestSealedKeysInTheRealAgents's).
	sealed := script
	script = strings.Replace(script, "// env: ANTHROPIC_API_KEY=$sealed:anthropic.apiKey@api.anthropic.com\n", "// env: ANTHROPIC_API_KEY=$secret:anthropic\n", 1)
	if script == sealed {
		t.Fatal("opencode.ts no longer seals ANTHROPIC_API_KEY for api.anthropic.com")
	}
	return script
}

// OpenCode, the real CLI, in the jail against a local server that speaks the Messages API: the
// first run starts a session, the second continues it from the opencode-state volume and the API
// sees the first turn; the key reaches the API and nothing else.
func TestOpenCodeContinuesItsSessionFromTheVolume(t *testing.T) {
	fn, err := functions.LoadPath("../../functions/opencode.ts")
	if err != nil {
		t.Fatal(err)
	}
	if s := fn.Spec; !s.Sandbox || len(s.Volumes) != 1 || s.Volumes[0].Name != "opencode-state" || s.Volumes[0].Path != ".local/share/opencode" ||
		len(s.Env) != 1 || s.Env[0].Name != "ANTHROPIC_API_KEY" || s.Env[0].Sealed == nil || s.Env[0].Sealed.Ref != "anthropic.apiKey" {
		t.Fatalf("opencode.ts annotations: %+v", s)
	}
	api, err := anthropictest.Start(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	h := hosttest.New(t, map[string]string{"opencode.ts": openCodeScript(t, api.URL+"/v1", "")}, func(c *app.Config) {
		c.AllowNetworkHost = []string{"opencode"}
	})
	h.SetSecret("anthropic", `{"apiKey":"`+openCodeKey+`"}`)

	type result struct{ Session, Text string }
	// 1. A new session; the prompt reaches OpenCode as written.
	first := "What is the fastest OSS workflow engine? Answer in \"quotes\", without $HOME or `uname`."
	r1 := h.Call("opencode", jsonPrompt(first))
	res1 := hosttest.Decode[result](t, r1.Data)
	if res1.Text != "You said: "+first || !strings.HasPrefix(res1.Session, "ses_") {
		t.Fatalf("first run: %s", r1.Data)
	}
	n := len(api.Requests())
	if n == 0 {
		t.Fatal("the first run reached no API")
	}

	// 2. The next run continues that session from the volume: the API sees the first turn.
	second := "What did I ask you before?"
	r2 := h.Call("opencode", jsonPrompt(second))
	res2 := hosttest.Decode[result](t, r2.Data)
	if res2.Text != "You said: "+second || res2.Session != res1.Session {
		t.Fatalf("second run: %s (first: %s)", r2.Data, r1.Data)
	}
	var resumed bool
	for _, r := range api.Requests()[n:] {
		if r.LastUserText() == second && strings.Contains(r.Text(), first) && strings.Contains(r.Text(), "You said: "+first) {
			resumed = true
		}
	}
	if !resumed {
		for _, r := range api.Requests() {
			t.Logf("%s %q", r.Path, r.LastUserText())
		}
		t.Fatal("no request of the second run replayed the first run's turn")
	}
	// 3. The session named explicitly continues it too.
	third := "And the time before?"
	r3 := h.Call("opencode", `{"prompt":`+jsonText(third)+`,"session":"`+res1.Session+`"}`)
	if res3 := hosttest.Decode[result](t, r3.Data); res3.Session != res1.Session || !strings.Contains(api.Requests()[len(api.Requests())-1].Text(), second) {
		t.Fatalf("third run: %s", r3.Data)
	}

	// The key went to the API in its header, and nowhere else: not the host's log (the job's
	// log included), the job records, the results, the volume.
	for _, r := range api.Requests() {
		if r.Path == "/v1/messages" && r.Header.Get("X-Api-Key") != openCodeKey {
			t.Fatalf("the API saw key %q", r.Header.Get("X-Api-Key"))
		}
	}
	for _, e := range h.Logs.All() {
		if line, _ := json.Marshal(e.ContextMap()); strings.Contains(e.Message+string(line), openCodeKey) {
			t.Fatalf("the host logged the key: %s %s", e.Message, line)
		}
	}
	for _, m := range []string{string(r1.Data), string(r2.Data), string(r3.Data)} {
		if strings.Contains(m, openCodeKey) {
			t.Fatal("a result holds the key")
		}
	}
	for _, id := range []string{r1.Header.Get(bus.HeaderJobID), r2.Header.Get(bus.HeaderJobID), r3.Header.Get(bus.HeaderJobID)} {
		rec, _ := json.Marshal(h.Record(id))
		if strings.Contains(string(rec), openCodeKey) {
			t.Fatalf("job record %s holds the key", id)
		}
	}
	if whole := h.ReadVolume(nil, "opencode-state", ""); !strings.Contains(whole, res1.Session) || strings.Contains(whole, openCodeKey) {
		t.Fatalf("the volume (%d bytes) lacks the session or holds the key", len(whole))
	}
}

// No secret, no OpenCode: the error names the secret. The model API failing: the job fails with
// OpenCode's own error, is retried, and the volume keeps the last good session.
func TestOpenCodeBadInput(t *testing.T) {
	api, err := anthropictest.Start(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	var down atomic.Int32
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		down.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte(`{"type":"error","error":{"type":"invalid_request_error","message":"the test's model API is down"}}`))
	}))
	defer broken.Close()
	good := openCodeScript(t, api.URL+"/v1", "")
	h := hosttest.New(t, map[string]string{
		"opencode.ts":      good,
		"opencode-down.ts": openCodeScript(t, broken.URL+"/v1", "// retries: 1\n"),
		// The key's declaration forgotten.
		"opencode-nokey.ts": strings.Replace(good, "// env: ANTHROPIC_API_KEY=$secret:anthropic\n", "", 1),
	}, func(c *app.Config) {
		c.AllowNetworkHost = []string{"opencode", "opencode-down", "opencode-nokey"}
	})

	// The secret not set: the host refuses before the job starts, naming it.
	e := hosttest.Decode[jobs.ErrorEvent](t, h.Call("opencode", jsonPrompt("hi")).Data)
	if !strings.Contains(e.Error, `"anthropic"`) || !strings.Contains(e.Error, "ANTHROPIC_API_KEY") || e.Attempts != 1 {
		t.Fatalf("missing secret: %+v", e)
	}
	// Not declared: the function says so before OpenCode starts.
	e = hosttest.Decode[jobs.ErrorEvent](t, h.Call("opencode-nokey", jsonPrompt("hi")).Data)
	if !strings.Contains(e.Error, "no Anthropic API key") || !strings.Contains(e.Error, "$sealed:anthropic.apiKey@api.anthropic.com") {
		t.Fatalf("undeclared key: %+v", e)
	}
	if len(api.Requests()) != 0 {
		t.Fatal("OpenCode ran without a key")
	}

	h.SetSecret("anthropic", `"`+openCodeKey+`"`)
	type result struct{ Session, Text string }
	ok := hosttest.Decode[result](t, h.Call("opencode", jsonPrompt("remember this")).Data)
	if ok.Text != "You said: remember this" {
		t.Fatalf("good run: %+v", ok)
	}
	before := h.ReadVolume(nil, "opencode-state", "")

	// The model API down: OpenCode's error, retried once, and the volume as the good run left it.
	e = hosttest.Decode[jobs.ErrorEvent](t, h.Call("opencode-down", jsonPrompt("and now?")).Data)
	if !strings.Contains(e.Error, "opencode: ") || !strings.Contains(e.Error, "the test's model API is down") || e.Attempts != 2 || down.Load() < 2 {
		t.Fatalf("API down: %+v (%d requests)", e, down.Load())
	}
	if strings.Contains(e.Error+e.StderrTail, openCodeKey) {
		t.Fatal("the error holds the key")
	}
	if after := h.ReadVolume(nil, "opencode-state", ""); after != before {
		t.Fatal("a failed run changed the volume")
	}
}
