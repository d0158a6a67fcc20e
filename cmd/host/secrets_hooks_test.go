package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// runNoKey runs the CLI with a home and config directory of its own, which hold no key file:
// whatever it sets, a host sealed.
func runNoKey(t *testing.T, home string, args ...string) (string, string, int) {
	t.Helper()
	return runIn(t, []string{"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config")}, args...)
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// noValueLogged fails if any line the host logged holds one of values, in its message or any
// field.
func noValueLogged(t *testing.T, h *hosttest.H, values ...string) {
	t.Helper()
	for _, e := range h.Logs.All() {
		line, _ := json.Marshal(e.ContextMap())
		for _, v := range values {
			if strings.Contains(e.Message, v) || strings.Contains(string(line), v) {
				t.Fatalf("the host logged a secret value: %q %s", e.Message, line)
			}
		}
	}
}

// `host secrets set` goes through a host, which seals with its own key: the CLI has no key file
// at all. A job resolves the value on the host's real path (a jail-less function of the real
// runner), a rotation is used by the next job, a removal fails the next; a short value and a
// value sealed with another key are refused saying why; no value is ever logged or answered.
func TestSecretsThroughTheHost(t *testing.T) {
	h := hosttest.New(t, map[string]string{"tok.py": `# secrets: api-token
import hashlib

def main(token: str):
    return {"sha": hashlib.sha256(token.encode()).hexdigest(), "n": len(token)}
`})
	url := h.Srv.ClientURL()
	home := t.TempDir()
	const v1, v2 = "first-token-value-1111", "second-token-value-22222"

	// Bad input first. Too short: refused by the host, saying why, and nothing stored.
	_, errOut, code := runNoKey(t, home, "--nats", url, "secrets", "set", "api-token", `"abc"`)
	if code == 0 || !strings.Contains(errOut, "shorter than 4") || !strings.Contains(errOut, "cannot be redacted") || !strings.Contains(errOut, "refused by the host test") {
		t.Fatalf("a 3-character secret: code %d, %s", code, errOut)
	}
	// Sealed here with a key that is not the hosts': refused at set, not found unreadable later.
	other := filepath.Join(home, "other.key")
	if err := os.WriteFile(other, []byte(strings.Repeat("ab", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = runNoKey(t, home, "--nats", url, "secrets", "set", "--local", "--secrets-key-file", other, "api-token", `"`+v1+`"`)
	if code == 0 || !strings.Contains(errOut, "not the hosts' key") || strings.Contains(errOut, v1) {
		t.Fatalf("a value sealed with another key: code %d, %s", code, errOut)
	}
	if out, _, _ := runNoKey(t, home, "--nats", url, "secrets", "ls"); strings.TrimSpace(out) != "" {
		t.Fatalf("a refused value was stored: %q", out)
	}
	// --local without a key file says what to do instead.
	if _, errOut, code = runNoKey(t, home, "--nats", url, "secrets", "set", "--local", "api-token", `"`+v1+`"`); code == 0 || !strings.Contains(errOut, "without --local the host seals") {
		t.Fatalf("--local without a key file: code %d, %s", code, errOut)
	}

	call := func() map[string]any {
		t.Helper()
		reply := h.Call("tok", `{"token":"$secret:api-token"}`)
		if strings.Contains(string(reply.Data), v1) || strings.Contains(string(reply.Data), v2) {
			t.Fatalf("a reply holds the value: %s", reply.Data)
		}
		return hosttest.Decode[map[string]any](t, reply.Data)
	}
	out, errOut, code := runNoKey(t, home, "--nats", url, "secrets", "set", "api-token", `"`+v1+`"`)
	if code != 0 || !strings.Contains(errOut, "secret api-token stored") {
		t.Fatalf("secrets set through the host: code %d, %s %s", code, out, errOut)
	}
	if _, err := os.Stat(defaultKeyFileIn(home)); err == nil {
		t.Fatal("the CLI wrote a key file")
	}
	if got := call(); got["sha"] != sha(v1) {
		t.Fatalf("the job did not get the value set through the host: %v", got)
	}
	// Rotation: the next job gets the new value.
	if _, errOut, code = runNoKey(t, home, "--nats", url, "secrets", "set", "api-token", `"`+v2+`"`); code != 0 || !strings.Contains(errOut, "rotated") {
		t.Fatalf("rotate: code %d, %s", code, errOut)
	}
	if got := call(); got["sha"] != sha(v2) || got["n"] != float64(len(v2)) {
		t.Fatalf("the job after the rotation did not get the new value: %v", got)
	}
	if _, errOut, code = runNoKey(t, home, "--nats", url, "secrets", "rm", "api-token"); code != 0 || !strings.Contains(errOut, "removed") {
		t.Fatalf("rm: code %d, %s", code, errOut)
	}
	reply := h.Call("tok", `{"token":"$secret:api-token"}`)
	if reply.Header.Get(bus.HeaderJobStatus) != "failed" || !strings.Contains(string(reply.Data), `secret \"api-token\" not found`) {
		t.Fatalf("a job after the removal: %s %s", reply.Header.Get(bus.HeaderJobStatus), reply.Data)
	}
	if _, errOut, code = runNoKey(t, home, "--nats", url, "secrets", "rm", "api-token"); code == 0 || !strings.Contains(errOut, "no such secret") {
		t.Fatalf("rm of a removed secret: code %d, %s", code, errOut)
	}

	// Each change is logged with who made it (the operator, as the audit stream names it: the
	// CLI's user@machine); no value in any line.
	for _, msg := range []string{"secret administration: secret set", "secret administration: secret rotated (a new value replaced the stored one)", "secret administration: secret removed"} {
		e := h.WaitLog(msg, 0)
		if by, _ := e.ContextMap()["by"].(string); by != client.CanceledBy() {
			t.Fatalf("%q logged by %q, want the CLI's user@machine %q", msg, by, client.CanceledBy())
		}
	}
	noValueLogged(t, h, v1, v2, "abc\"")
}

func defaultKeyFileIn(home string) string {
	return filepath.Join(home, ".config", "host", "secrets.key")
}

func sign(key, body string) string {
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte(body))
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// A source added with `host hooks add` takes signed deliveries at once, without a restart; its
// 202's id finds the job it started (host jobs --delivery); unsigned and wrongly signed ones
// are refused; a source whose key is missing is warned about when added; removed, it is 404.
func TestHooksWithoutARestart(t *testing.T) {
	h := hosttest.New(t, map[string]string{
		"onpush.sh": "# on: webhook.gh\ncat >/dev/null\necho '{\"seen\":true}'\n",
		"steal.py":  "# secrets: legacy-key\ndef main(k):\n    return {\"got\": k}\n",
	})
	srv := httptest.NewServer(h.Web())
	t.Cleanup(srv.Close)
	// A second host, started before any source is added: it must follow the bucket too.
	_, web2 := h.AddWebHost(t)
	srv2 := httptest.NewServer(web2)
	t.Cleanup(srv2.Close)
	url := h.Srv.ClientURL()
	home := t.TempDir()
	const key = "gh-signing-key-value-123"
	body := `{"ref":"refs/heads/main"}`
	post := func(hdr map[string]string) (int, string) {
		t.Helper()
		code, resp, _ := hosttest.Post(t, srv.URL+"/hooks/gh", body, hdr)
		return code, resp
	}

	// Bad input first.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"hooks", "add", "gh", "hmac"}, "hmac needs --key"},
		{[]string{"hooks", "add", "gh", "sha1", "--key", "k1"}, `unknown authentication "sha1"`},
		{[]string{"hooks", "add", "g h", "open"}, "a name is 1 to 64 letters"},
		{[]string{"hooks", "add", "gh", "open", "--key", "k1"}, "open takes no --key"},
		{[]string{"hooks", "rm", "nosuch"}, "no such webhook source"},
	} {
		if _, errOut, code := runNoKey(t, home, append([]string{"--nats", url}, c.args...)...); code == 0 || !strings.Contains(errOut, c.want) {
			t.Fatalf("%v: code %d, %s; want %q", c.args, code, errOut, c.want)
		}
	}
	if code, _ := post(map[string]string{"X-Hub-Signature-256": sign(key, body)}); code != 404 {
		t.Fatalf("a delivery to a source nobody added: %d, want 404", code)
	}

	// Added before its key: the CLI and the host say so at once.
	_, errOut, code := runNoKey(t, home, "--nats", url, "hooks", "add", "gh", "hmac", "--key", "gh-key")
	if code != 0 || !strings.Contains(errOut, "webhook source gh added") || !strings.Contains(errOut, "warning: webhook key gh-key is not set") {
		t.Fatalf("hooks add: code %d, %s", code, errOut)
	}
	if e := h.WaitLog("webhook source's key is missing: its deliveries get 503 until it is set", 0); e.ContextMap()["source"] != "gh" {
		t.Fatalf("the missing key's warning names %v", e.ContextMap())
	}
	h.Eventually("the added source is served (503 while its key is missing)", func() bool {
		code, _ := post(map[string]string{"X-Hub-Signature-256": sign(key, body)})
		return code == 503
	})
	if _, errOut, code = runNoKey(t, home, "--nats", url, "secrets", "set", "--hook", "gh-key", `"`+key+`"`); code != 0 {
		t.Fatalf("secrets set --hook: %s", errOut)
	}
	if out, _, _ := runNoKey(t, home, "--nats", url, "hooks", "ls"); !strings.Contains(out, "gh") || !strings.Contains(out, "hmac") || !strings.Contains(out, "gh-key") || strings.Contains(out, "missing") {
		t.Fatalf("hooks ls: %s", out)
	}

	// A key set the contract's way, among the function secrets, for a source added from the
	// CLI: no function declaring it is handed it, though the source came after the host started.
	const legacy = "legacy-bearer-7788"
	if _, errOut, code = runNoKey(t, home, "--nats", url, "hooks", "add", "legacy", "bearer", "--key", "legacy-key"); code != 0 {
		t.Fatalf("hooks add legacy: %s", errOut)
	}
	h.Eventually("the legacy source is loaded", func() bool {
		code, _, _ := hosttest.Post(t, srv.URL+"/hooks/legacy", body, nil)
		return code != 404
	})
	if _, errOut, code = runNoKey(t, home, "--nats", url, "secrets", "set", "legacy-key", `"`+legacy+`"`); code != 0 {
		t.Fatalf("secrets set legacy-key: %s", errOut)
	}
	if reply := h.Call("steal", `{"k":"$secret:legacy-key"}`); reply.Header.Get(bus.HeaderJobStatus) == "succeeded" ||
		!strings.Contains(string(reply.Data), `secret \"legacy-key\" is the key of webhook source \"legacy\"`) || strings.Contains(string(reply.Data), legacy) {
		t.Fatalf("a function declaring a bucket source's key: %s %s", reply.Header.Get(bus.HeaderJobStatus), reply.Data)
	}
	if code, _, _ := hosttest.Post(t, srv.URL+"/hooks/legacy", body, map[string]string{"Authorization": "Bearer " + legacy}); code != 202 {
		t.Fatalf("a delivery with the key set the contract's way: %d, want 202", code)
	}

	// Unsigned and wrongly signed: refused.
	if code, resp := post(nil); code != 401 || !strings.Contains(resp, "X-Hub-Signature-256") {
		t.Fatalf("unsigned delivery: %d %s", code, resp)
	}
	if code, resp := post(map[string]string{"X-Hub-Signature-256": sign("another-key-000", body)}); code != 401 || !strings.Contains(resp, "does not match") {
		t.Fatalf("wrongly signed delivery: %d %s", code, resp)
	}
	// Signed: 202 with the delivery id, which finds its job.
	code, resp := post(map[string]string{"X-Hub-Signature-256": sign(key, body), "X-GitHub-Delivery": "d-1"})
	if code != 202 {
		t.Fatalf("signed delivery: %d %s", code, resp)
	}
	got := hosttest.Decode[map[string]string](t, []byte(resp))
	id := got["id"]
	if id == "" || got["flow"] != id {
		t.Fatalf("the 202 answers %s, want the delivery id as id and flow", resp)
	}
	h.Eventually("the second host takes a signed delivery to the added source", func() bool {
		code2, resp2, _ := hosttest.Post(t, srv2.URL+"/hooks/gh", `{"second":true}`, map[string]string{"X-Hub-Signature-256": sign(key, `{"second":true}`)})
		return code2 == 202 && strings.Contains(resp2, `"flow"`)
	})
	var jobsOut string
	h.Eventually("host jobs --delivery lists the job the delivery started, succeeded", func() bool {
		jobsOut, _, _ = runNoKey(t, home, "--nats", url, "jobs", "--delivery", id, "--json")
		return strings.Contains(jobsOut, `"function": "onpush"`) && strings.Contains(jobsOut, `"status": "succeeded"`)
	})
	if !strings.Contains(jobsOut, `"flow_id": "`+id+`"`) {
		t.Fatalf("the job's record does not carry the delivery id as its flow: %s", jobsOut)
	}
	// Who started it, as the host that took the delivery vouched for it.
	if !strings.Contains(jobsOut, `"started_by": "webhook gh"`) || strings.Contains(jobsOut, `"starter"`) {
		t.Fatalf("the job's record does not say the webhook started it: %s", jobsOut)
	}

	// Removed: 404 on every host, without a restart.
	if _, errOut, code = runNoKey(t, home, "--nats", url, "hooks", "rm", "gh"); code != 0 || !strings.Contains(errOut, "removed") {
		t.Fatalf("hooks rm: code %d, %s", code, errOut)
	}
	h.Eventually("the removed source answers 404 on both hosts", func() bool {
		code, _ := post(map[string]string{"X-Hub-Signature-256": sign(key, body)})
		code2, _, _ := hosttest.Post(t, srv2.URL+"/hooks/gh", body, map[string]string{"X-Hub-Signature-256": sign(key, body)})
		return code == 404 && code2 == 404
	})
	noValueLogged(t, h, key, legacy)
}
