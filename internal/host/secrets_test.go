package host_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/host"
	"github.com/agenthost/host/internal/secrets"
)

func (h *harness) setSecret(name, value string) {
	h.t.Helper()
	js, err := jetstream.New(h.nc)
	if err != nil {
		h.t.Fatal(err)
	}
	st, err := secrets.Bind(context.Background(), js, h.key)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := st.Set(context.Background(), name, json.RawMessage(value)); err != nil {
		h.t.Fatal(err)
	}
}

func TestSecretsResolvedInsideAndRedactedEverywhere(t *testing.T) {
	h := newHarness(t, map[string]string{
		"leaky.py": `# sandbox
# env: TOKEN=$secret:gh-token
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
	h.setSecret("anthropic", `{"apiKey":"`+key+`"}`)
	h.setSecret("gh-token", `"`+token+`"`)
	logs := h.sub("agent.logs.leaky.*")
	reply := h.call("leaky", `{"api":"$secret:anthropic","note":"ok"}`)
	if reply.Header.Get("Job-Status") != "succeeded" {
		t.Fatalf("reply: %s", reply.Data)
	}
	// The function saw the real values (their lengths prove it) and nobody sees them outside.
	res := decode[map[string]any](t, reply.Data)
	if res["echo"] != secrets.Redacted || res["token"] != secrets.Redacted {
		t.Fatalf("result not redacted: %s", reply.Data)
	}
	if l := res["lengths"].([]any); l[0] != float64(len(key)) || l[1] != float64(len(token)) {
		t.Fatalf("the function did not get the secrets: %v", l)
	}
	for range 2 {
		line := string(h.next(logs).Data)
		if strings.Contains(line, key) || strings.Contains(line, token) || !strings.Contains(line, secrets.Redacted) {
			t.Fatalf("log line leaks or is not redacted: %q", line)
		}
	}
	rec := h.record(reply.Header.Get("Job-Id"))
	recJSON, _ := json.Marshal(rec)
	if strings.Contains(string(recJSON), key) || strings.Contains(string(recJSON), token) {
		t.Fatalf("job record leaks: %s", recJSON)
	}

	errs := h.sub("agent.error.leaky")
	h.call("leaky", `{"api":"$secret:anthropic","note":"fail"}`)
	ev := h.next(errs)
	if strings.Contains(string(ev.Data), key) || !strings.Contains(string(ev.Data), "failing with "+secrets.Redacted) {
		t.Fatalf("error event leaks or is not redacted: %s", ev.Data)
	}
}

func TestMissingSecretNamesTheKey(t *testing.T) {
	h := newHarness(t, map[string]string{"needs.py": "# sandbox\ndef main(api: str):\n    return 1\n"})
	reply := h.call("needs", `{"api":"$secret:nope"}`)
	ev := decode[host.ErrorEvent](t, reply.Data)
	if !strings.Contains(ev.Error, `"nope"`) || !strings.Contains(ev.Error, "not found") || ev.Attempts != 1 {
		t.Fatalf("error = %+v", ev)
	}
}
