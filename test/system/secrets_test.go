package system_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/secrets"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

func TestSecretsResolvedInsideAndRedactedEverywhere(t *testing.T) {
	h := hosttest.New(t, map[string]string{
		"leaky.py": `# sandbox
# env: TOKEN=$secret:gh-token
# secrets: anthropic
import os, sys

def main(api: dict, note: str):
    key = api["apiKey"]
    token = os.environ["TOKEN"]
    print(f"the key is {key} and the token is {token}")
    print(f"stderr also has {key}", file=sys.stderr)
    if note == "fail":
        raise RuntimeError(f"failing with {key}")
    return {"echo": key, "token": token, "lengths": [len(key), len(token)]}
`,
	})
	const key, token = "sk-ant-very-secret-1234", "ghp_token_value_5678"
	h.SetSecret("anthropic", `{"apiKey":"`+key+`"}`)
	h.SetSecret("gh-token", `"`+token+`"`)
	logs := h.Sub("agent.logs.leaky.*")
	reply := h.Call("leaky", `{"api":"$secret:anthropic","note":"ok"}`)
	if reply.Header.Get(bus.HeaderJobStatus) != "succeeded" {
		t.Fatalf("reply: %s", reply.Data)
	}
	// The function saw the real values (their lengths prove it) and nobody sees them outside.
	res := hosttest.Decode[map[string]any](t, reply.Data)
	if res["echo"] != secrets.Redacted || res["token"] != secrets.Redacted {
		t.Fatalf("result not redacted: %s", reply.Data)
	}
	if l := res["lengths"].([]any); l[0] != float64(len(key)) || l[1] != float64(len(token)) {
		t.Fatalf("the function did not get the secrets: %v", l)
	}
	for range 2 {
		line := string(h.Next(logs).Data)
		if strings.Contains(line, key) || strings.Contains(line, token) || !strings.Contains(line, secrets.Redacted) {
			t.Fatalf("log line leaks or is not redacted: %q", line)
		}
	}
	rec := h.Record(reply.Header.Get(bus.HeaderJobID))
	recJSON, _ := json.Marshal(rec)
	if strings.Contains(string(recJSON), key) || strings.Contains(string(recJSON), token) {
		t.Fatalf("job record leaks: %s", recJSON)
	}

	errs := h.Sub("agent.error.leaky")
	h.Call("leaky", `{"api":"$secret:anthropic","note":"fail"}`)
	ev := h.Next(errs)
	if strings.Contains(string(ev.Data), key) || !strings.Contains(string(ev.Data), "failing with "+secrets.Redacted) {
		t.Fatalf("error event leaks or is not redacted: %s", ev.Data)
	}
}

func TestMissingSecretNamesTheKey(t *testing.T) {
	h := hosttest.New(t, map[string]string{"needs.py": "# sandbox\n# secrets: nope\ndef main(api: str):\n    return 1\n"})
	reply := h.Call("needs", `{"api":"$secret:nope"}`)
	ev := hosttest.Decode[jobs.ErrorEvent](t, reply.Data)
	if !strings.Contains(ev.Error, `"nope"`) || !strings.Contains(ev.Error, "not found") || ev.Attempts != 1 {
		t.Fatalf("error = %+v", ev)
	}
}
