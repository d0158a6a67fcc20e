package system_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/hooks"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/secrets"
	"github.com/agenthost/host/internal/testkit/hosttest"
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
	if reply.Header.Get(bus.HeaderJobStatus) == "succeeded" {
		t.Fatalf("an undeclared secret was handed to the function: %s", reply.Data)
	}
	ev := hosttest.Decode[jobs.ErrorEvent](t, reply.Data)
	for _, want := range []string{`secret "s1" is not declared by function "wordcount"`, `add "# secrets: s1"`} {
		if !strings.Contains(ev.Error, want) {
			t.Errorf("error %q lacks %q", ev.Error, want)
		}
	}
	if ev.Attempts != 1 {
		t.Errorf("attempts = %d: a refusal is terminal, retrying cannot help", ev.Attempts)
	}
	rec := h.Record(reply.Header.Get(bus.HeaderJobID))
	recJSON, _ := json.Marshal(rec)
	for _, leak := range []string{value, strings.ToLower(value), "9f3k"} {
		if strings.Contains(string(reply.Data), leak) || strings.Contains(string(recJSON), leak) {
			t.Fatalf("the refusal leaks %q: reply %s record %s", leak, reply.Data, recJSON)
		}
	}

	// Refused before the store is read: a missing undeclared secret is "not declared", never
	// "not found" (which would tell the caller which names exist).
	missing := hosttest.Decode[jobs.ErrorEvent](t, h.Call("wordcount", `{"text":"$secret:absent"}`).Data)
	if !strings.Contains(missing.Error, `secret "absent" is not declared by function "wordcount"`) || strings.Contains(missing.Error, "not found") {
		t.Fatalf("undeclared missing secret: %q", missing.Error)
	}

	// Nested deep in the arguments is no way around it.
	deep := hosttest.Decode[jobs.ErrorEvent](t, h.Call("wordcount", `{"text":"x","extra":[{"k":"$secret:s1"}]}`).Data)
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
	if ok.Header.Get(bus.HeaderJobStatus) != "succeeded" || string(ok.Data) != `{"words": ["hello", "hello"]}` && string(ok.Data) != `{"words":["hello","hello"]}` {
		t.Fatalf("the host stopped serving wordcount: %s", ok.Data)
	}
	decl := h.Call("declared", `{"text":"$secret:s1"}`)
	if decl.Header.Get(bus.HeaderJobStatus) != "succeeded" || !strings.Contains(string(decl.Data), `21`) {
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
	ev := hosttest.Decode[jobs.ErrorEvent](t, reply.Data)
	if !strings.Contains(ev.Error, "failing with pin "+secrets.Redacted) {
		t.Fatalf("the function did not fail as written: %+v", ev)
	}
	check("error event", string(reply.Data))
	check("stderr tail", ev.StderrTail)
	// stdout and stderr are separate pipes: their lines (and the traceback's) arrive in either
	// order. Every line is checked until both printed lines have come, redacted.
	for want := map[string]bool{"pin is ": true, "stderr pin ": true}; len(want) > 0; {
		line := string(h.Next(logs).Data)
		check("log line", line)
		for prefix := range want {
			if strings.HasPrefix(line, prefix) {
				if !strings.Contains(line, secrets.Redacted) {
					t.Errorf("log line not redacted: %q", line)
				}
				delete(want, prefix)
			}
		}
	}
	recJSON, _ := json.Marshal(h.Record(reply.Header.Get(bus.HeaderJobID)))
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

// Red team row 6, second half: webhook HMAC keys lived in the secret store, so a function
// could be handed one and sign forged deliveries. A function that declares the key's name
// (in secrets: or env:) still cannot obtain it: not when it was set as a webhook key, and not
// when it was set the contract's way (`host secrets set <key>`), before or after the host
// moved it out of the function secrets.
func TestAttackFunctionDeclaringAWebhookKeyCannotObtainIt(t *testing.T) {
	h := hosttest.New(t, map[string]string{
		"steal.py":     "# sandbox\n# secrets: gh-key legacy-key\ndef main(k):\n    return {\"got\": k}\n",
		"steal_env.sh": "# sandbox\n# env: K=$secret:gh-key\necho \"\\\"$K\\\"\"\n",
	}, func(c *app.Config) {
		c.Hooks = []hooks.Source{{Name: "github", Auth: hooks.HMAC, Secret: "gh-key"}, {Name: "legacy", Auth: hooks.Bearer, Secret: "legacy-key"}}
	})
	const hookValue, legacyValue = "whsec-hook-value-5566", "legacy-bearer-7788"
	js, err := jetstream.New(h.NC)
	if err != nil {
		t.Fatal(err)
	}
	hk, err := secrets.BindHookKeys(context.Background(), js, h.Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := hk.Set(context.Background(), "gh-key", json.RawMessage(`"`+hookValue+`"`)); err != nil {
		t.Fatal(err)
	}
	h.SetSecret("legacy-key", `"`+legacyValue+`"`) // the contract's way, after the host started

	web := httptest.NewServer(h.Web())
	defer web.Close()
	post := func(source string, sign func(*http.Request, []byte)) int {
		body := []byte(`{"action":"opened"}`)
		req, _ := http.NewRequest("POST", web.URL+"/hooks/"+source, bytes.NewReader(body))
		sign(req, body)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	hmacWith := func(key string) func(*http.Request, []byte) {
		return func(r *http.Request, body []byte) {
			m := hmac.New(sha256.New, []byte(key))
			m.Write(body)
			r.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(m.Sum(nil)))
		}
	}
	bearer := func(tok string) func(*http.Request, []byte) {
		return func(r *http.Request, _ []byte) { r.Header.Set("Authorization", "Bearer "+tok) }
	}

	steal := func(when string) {
		t.Helper()
		for _, c := range []struct{ fn, payload string }{
			{"steal", `{"k":"$secret:gh-key"}`},
			{"steal", `{"k":"$secret:legacy-key"}`},
			{"steal_env", ``},
		} {
			reply := h.Call(c.fn, c.payload)
			if reply.Header.Get(bus.HeaderJobStatus) == "succeeded" {
				t.Errorf("%s: %s %s obtained a webhook key: %s", when, c.fn, c.payload, reply.Data)
			}
			if strings.Contains(string(reply.Data), hookValue) || strings.Contains(string(reply.Data), legacyValue) {
				t.Errorf("%s: %s leaks a webhook key: %s", when, c.fn, reply.Data)
			}
		}
	}
	// The legacy key still sits among the function secrets here: the host refuses it by name.
	steal("before any delivery")
	ev := hosttest.Decode[jobs.ErrorEvent](t, h.Call("steal", `{"k":"$secret:legacy-key"}`).Data)
	if !strings.Contains(ev.Error, `secret "legacy-key" is the key of webhook source "legacy"`) {
		t.Errorf("refusal does not say why: %q", ev.Error)
	}

	// The webhooks themselves work with both keys.
	if code := post("github", hmacWith(hookValue)); code != http.StatusAccepted {
		t.Fatalf("github delivery signed with the webhook key: %d", code)
	}
	if code := post("github", hmacWith("forged")); code != http.StatusUnauthorized {
		t.Fatalf("forged github delivery: %d", code)
	}
	if code := post("legacy", bearer(legacyValue)); code != http.StatusAccepted {
		t.Fatalf("legacy delivery: %d", code)
	}
	steal("after the legacy key was moved")
	fs, err := secrets.Bind(context.Background(), js, h.Key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Get(context.Background(), "legacy-key"); !errors.Is(err, secrets.ErrNotFound) {
		t.Fatalf("the legacy webhook key is still a function secret: %v", err)
	}

	// A second host that does not declare these hooks (so has no name guard) still cannot
	// reach them: they are no longer function secrets at all. (Which host takes each call is
	// up to NATS; over several calls both do, as a rule.)
	h.AddHost(t)
	for range 3 {
		reply := h.Call("steal", `{"k":"$secret:gh-key"}`)
		if reply.Header.Get(bus.HeaderJobStatus) == "succeeded" || strings.Contains(string(reply.Data), hookValue) {
			t.Fatalf("a host without the hook guard handed the key out: %s", reply.Data)
		}
		reply = h.Call("steal", `{"k":"$secret:legacy-key"}`)
		if reply.Header.Get(bus.HeaderJobStatus) == "succeeded" || strings.Contains(string(reply.Data), legacyValue) {
			t.Fatalf("a host without the hook guard handed the moved key out: %s", reply.Data)
		}
	}
	// And the host still serves ordinary work.
	if r := h.Call("steal", `{"k":"plain"}`); r.Header.Get(bus.HeaderJobStatus) != "succeeded" {
		t.Fatalf("the host stopped serving: %s", r.Data)
	}
}
