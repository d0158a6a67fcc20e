package host_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/host"
	"github.com/agenthost/host/internal/hosttest"
	"github.com/agenthost/host/internal/secrets"
)

// Red team row 6: `nats req agent.call.wordcount '{"text":"$secret:s1"}'` returned the secret
// lower-cased and split into words. A caller's $secret: for a secret the function does not
// declare must be a terminal error naming the secret and the function, holding nothing of the
// value, raised before the store is read; the host keeps serving.
func TestAttackCallerPullsUndeclaredSecretThroughAFunction(t *testing.T) {
	h := hosttest.New(t, map[string]string{
		"wordcount.py": "# sandbox\ndef main(text: str):\n    return {\"words\": text.lower().split()}\n",
		"declared.py":  "# sandbox\n# secrets: s1\ndef main(text: str):\n    return {\"n\": len(text)}\n",
	})
	const value = "Top Secret Value 9f3K"
	h.SetSecret("s1", `"`+value+`"`)
	results := h.Sub("agent.result.wordcount")

	reply := h.Call("wordcount", `{"text":"$secret:s1"}`)
	if reply.Header.Get("Job-Status") == "succeeded" {
		t.Fatalf("an undeclared secret was handed to the function: %s", reply.Data)
	}
	ev := hosttest.Decode[host.ErrorEvent](t, reply.Data)
	for _, want := range []string{`secret "s1" is not declared by function "wordcount"`, `add "# secrets: s1"`} {
		if !strings.Contains(ev.Error, want) {
			t.Errorf("error %q lacks %q", ev.Error, want)
		}
	}
	if ev.Attempts != 1 {
		t.Errorf("attempts = %d: a refusal is terminal, retrying cannot help", ev.Attempts)
	}
	rec := h.Record(reply.Header.Get("Job-Id"))
	recJSON, _ := json.Marshal(rec)
	for _, leak := range []string{value, strings.ToLower(value), "9f3k"} {
		if strings.Contains(string(reply.Data), leak) || strings.Contains(string(recJSON), leak) {
			t.Fatalf("the refusal leaks %q: reply %s record %s", leak, reply.Data, recJSON)
		}
	}

	// Refused before the store is read: a missing undeclared secret is "not declared", never
	// "not found" (which would tell the caller which names exist).
	missing := hosttest.Decode[host.ErrorEvent](t, h.Call("wordcount", `{"text":"$secret:absent"}`).Data)
	if !strings.Contains(missing.Error, `secret "absent" is not declared by function "wordcount"`) || strings.Contains(missing.Error, "not found") {
		t.Fatalf("undeclared missing secret: %q", missing.Error)
	}

	// Nested deep in the arguments is no way around it.
	deep := hosttest.Decode[host.ErrorEvent](t, h.Call("wordcount", `{"text":"x","extra":[{"k":"$secret:s1"}]}`).Data)
	if !strings.Contains(deep.Error, `secret "s1" is not declared`) {
		t.Fatalf("nested reference: %q", deep.Error)
	}

	// Nothing was published as a result, and the host still serves, both the refused function
	// with ordinary arguments and a function that declares the secret.
	select {
	case m := <-results:
		t.Fatalf("a refused run published a result: %s", m.Data)
	case <-time.After(200 * time.Millisecond):
	}
	ok := h.Call("wordcount", `{"text":"Hello hello"}`)
	if ok.Header.Get("Job-Status") != "succeeded" || string(ok.Data) != `{"words": ["hello", "hello"]}` && string(ok.Data) != `{"words":["hello","hello"]}` {
		t.Fatalf("the host stopped serving wordcount: %s", ok.Data)
	}
	decl := h.Call("declared", `{"text":"$secret:s1"}`)
	if decl.Header.Get("Job-Status") != "succeeded" || !strings.Contains(string(decl.Data), `21`) {
		t.Fatalf("a declared secret was not resolved: %s", decl.Data)
	}
}

// Red team row 5: `host secrets set cred '{"user":"admin","pin":48291736}'` and a function that
// prints the pin: only string leaves were redacted, so the pin showed in the log, the error
// event, its stderr tail, the job record and the dead letter. Its base64 went through too.
func TestAttackNumberLeafAndBase64OfSecretAreRedactedEverywhere(t *testing.T) {
	h := hosttest.New(t, map[string]string{
		"pin.py": `# sandbox
# secrets: cred
import base64, json, sys

def main(cred: dict):
    pin = cred["pin"]
    whole = base64.b64encode(json.dumps(cred, separators=(",", ":")).encode()).decode()
    print(f"pin is {pin}; basic {whole}")
    print(f"stderr pin {pin} b64 {base64.b64encode(str(pin).encode()).decode()}", file=sys.stderr)
    raise RuntimeError(f"failing with pin {pin}")
`,
	})
	const pin = "48291736"
	cred := `{"user":"admin","pin":` + pin + `}`
	h.SetSecret("cred", cred)
	leaks := []string{pin, base64.StdEncoding.EncodeToString([]byte(cred))}
	check := func(where, text string) {
		t.Helper()
		for _, l := range leaks {
			if strings.Contains(text, l) {
				t.Errorf("%s leaks %q: %s", where, l, text)
			}
		}
	}
	logs := h.Sub("agent.logs.pin.*")
	reply := h.Call("pin", `{"cred":"$secret:cred"}`)
	ev := hosttest.Decode[host.ErrorEvent](t, reply.Data)
	if !strings.Contains(ev.Error, "failing with pin "+secrets.Redacted) {
		t.Fatalf("the function did not fail as written: %+v", ev)
	}
	check("error event", string(reply.Data))
	check("stderr tail", ev.StderrTail)
	for range 2 {
		line := string(h.Next(logs).Data)
		check("log line", line)
		if !strings.Contains(line, secrets.Redacted) {
			t.Errorf("log line not redacted: %q", line)
		}
	}
	recJSON, _ := json.Marshal(h.Record(reply.Header.Get("Job-Id")))
	check("job record", string(recJSON))

	c, err := client.New(context.Background(), h.NC)
	if err != nil {
		t.Fatal(err)
	}
	dl, err := c.DeadLetters(context.Background(), "pin")
	if err != nil || len(dl) != 1 {
		t.Fatalf("dead letters: %v %+v", err, dl)
	}
	dlJSON, _ := json.Marshal(dl)
	check("dead letter", string(dlJSON))
}
