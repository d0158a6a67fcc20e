package dashboard_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/audit"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/hooks"
	"github.com/agenthost/host/internal/secrets"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

func sha256hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// noValueIn fails if the host logged one of values anywhere, in a message or a field.
func noValueIn(t *testing.T, h *hosttest.H, values ...string) {
	t.Helper()
	for _, e := range h.Logs.All() {
		fields, _ := json.Marshal(e.ContextMap())
		for _, v := range values {
			if strings.Contains(e.Message, v) || strings.Contains(string(fields), v) {
				t.Fatalf("the host logged a secret value: %q %s", e.Message, fields)
			}
		}
	}
}

// The Secrets page sets, rotates and removes a secret through the host; a job resolves it on
// the host's real path (a jail-less function of the real runner) and gets the rotated value
// after the rotation; a short value is refused with the host's own words; no value comes back
// in a page, a log line or a reply.
func TestSecretsPageSetsRotatesAndRemoves(t *testing.T) {
	h := hosttest.New(t, map[string]string{"tok.py": `# secrets: api-token
import hashlib

def main(token: str):
    return {"sha": hashlib.sha256(token.encode()).hexdigest()}
`})
	s := openSite(t, h, h.Web())
	const v1, v2 = "page-token-value-AAAA1", "page-token-value-BBBB22"
	html := func() string {
		return get(s, "read the page", chromedp.Evaluate[string](`document.documentElement.outerHTML`))
	}
	call := func() string {
		t.Helper()
		reply := h.Call("tok", `{"token":"$secret:api-token"}`)
		if strings.Contains(string(reply.Data), v1) || strings.Contains(string(reply.Data), v2) {
			t.Fatalf("a reply holds the value: %s", reply.Data)
		}
		return hosttest.Decode[map[string]string](t, reply.Data)["sha"]
	}

	// Bad input first: three characters, refused on the page with the host's very message.
	s.do("try a short value", chromedp.Navigate(s.url+"/secrets"), chromedp.WaitVisible(`form.secret-set`),
		chromedp.SendKeys(`form.secret-set input[name=name]`, "api-token"), chromedp.SendKeys(`form.secret-set input[name=value]`, "abc"),
		chromedp.Click(`form.secret-set button`), chromedp.WaitVisible(`p.form-error`))
	pageSays := get(s, "read the refusal", chromedp.Text(`p.form-error`))
	want := secrets.CheckSet("api-token", json.RawMessage(`"abc"`), false).Error()
	if pageSays != want || !strings.Contains(pageSays, "shorter than 4") {
		t.Fatalf("the page says %q, want %q", pageSays, want)
	}
	c, err := client.New(context.Background(), h.NC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetSecret(context.Background(), "api-token", json.RawMessage(`"abc"`), false, "test"); err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("the host says %v, want it to end with the page's %q", err, want)
	}
	if v := get(s, "read the kept name", chromedp.Value(`form.secret-set input[name=name]`)); v != "api-token" {
		t.Fatalf("the refused form lost its name: %q", v)
	}
	if strings.Contains(html(), `value="abc"`) {
		t.Fatal("the refused value is shown back")
	}
	s.screenshot("secrets-refused")

	s.do("set it", chromedp.WaitNotPresent(`p.done`), chromedp.SendKeys(`form.secret-set input[name=value]`, v1), chromedp.Click(`form.secret-set button`),
		chromedp.WaitVisible(`p.done`))
	if done := get(s, "read what was done", chromedp.Text(`p.done`)); done != "secret api-token set" {
		t.Fatalf("after setting: %q", done)
	}
	if stored := get(s, "read the row", chromedp.Text(`tr[data-secret="api-token"] td:nth-child(2)`)); stored != "yes" {
		t.Fatalf("the row says stored %q", stored)
	}
	if got := call(); got != sha256hex(v1) {
		t.Fatalf("the job got a value hashing to %s, want the one set on the page", got)
	}

	// From a fresh page, so that the next p.done is the rotation's, not the set's.
	s.do("rotate it", chromedp.Navigate(s.url+"/secrets"), chromedp.WaitVisible(`tr[data-secret="api-token"]`), chromedp.SendKeys(`tr[data-secret="api-token"] form.secret-rotate input[name=value]`, v2),
		chromedp.Click(`tr[data-secret="api-token"] form.secret-rotate button`), chromedp.WaitVisible(`p.done`))
	if done := get(s, "read what was done", chromedp.Text(`p.done`)); !strings.HasPrefix(done, "secret api-token rotated") {
		t.Fatalf("after rotating: %q", done)
	}
	if got := call(); got != sha256hex(v2) {
		t.Fatalf("the job after the rotation got a value hashing to %s, want the new one", got)
	}
	if page := html(); strings.Contains(page, v1) || strings.Contains(page, v2) {
		t.Fatal("the page shows a value")
	}
	s.screenshot("secrets")

	s.do("remove it", chromedp.Navigate(s.url+"/secrets"), chromedp.WaitVisible(`tr[data-secret="api-token"]`), chromedp.Click(`tr[data-secret="api-token"] form.secret-remove button`), chromedp.WaitVisible(`p.done`))
	if stored := get(s, "read the row", chromedp.Text(`tr[data-secret="api-token"] td:nth-child(2)`)); stored != "missing" {
		t.Fatalf("after removing, the row (still declared by tok) says %q", stored)
	}
	if d := s.dialogsSeen(); len(d) != 1 || !strings.Contains(d[0], "Remove secret api-token?") {
		t.Fatalf("the removal was not confirmed first: %v", d)
	}

	for _, msg := range []string{"secret administration: secret set", "secret administration: secret rotated (a new value replaced the stored one)", "secret administration: secret removed"} {
		if by, _ := h.WaitLog(msg, 0).ContextMap()["by"].(string); !strings.HasPrefix(by, "the dashboard (") {
			t.Fatalf("%q logged by %q, want the dashboard's who", msg, by)
		}
	}
	// Each act is in the audit stream as the web face's, by the login that did it. The short
	// value never left the page (it checks first, in the host's words), so it is no act.
	entries, err := audit.Read(context.Background(), c.JS, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var web []string
	for _, e := range entries {
		if e.Face == "web" {
			if !strings.HasPrefix(e.Who, "the dashboard (") || e.Target != "api-token" {
				t.Errorf("audit entry %+v: want the dashboard's login and the secret's name", e)
			}
			web = append(web, e.Act+errMark(e.Error))
		}
	}
	if want := []string{"secret.set", "secret.set", "secret.rm"}; !slices.Equal(web, want) {
		t.Errorf("the web face's audit entries: %q, want %q", web, want)
	}
	noValueIn(t, h, v1, v2)
}

func errMark(e string) string {
	if e != "" {
		return " refused"
	}
	return ""
}

// The Webhooks page lists a source added through the registry (as `host hooks add` does) with
// its URL, its auth and its last delivery, linked to the flow, and so to the job, it started;
// a source whose key is missing says so on the page.
func TestWebhooksPage(t *testing.T) {
	h := hosttest.New(t, map[string]string{"onpush.sh": "# on: webhook.gh\ncat >/dev/null\necho '{\"seen\":true}'\n"})
	s := openSite(t, h, h.Web())
	ctx := context.Background()
	js, err := jetstream.New(h.NC)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := hooks.BindRegistry(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range []hooks.Source{{Name: "gh", Auth: hooks.HMAC, Secret: "gh-key"}, {Name: "alerts", Auth: hooks.Bearer, Secret: "alerts-token"}} {
		if _, err := reg.Add(ctx, src, "test"); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(ctx, h.NC)
	if err != nil {
		t.Fatal(err)
	}
	const key = "webhook-page-key-0001"
	if _, err := c.SetSecret(ctx, "gh-key", json.RawMessage(`"`+key+`"`), true, "test"); err != nil {
		t.Fatal(err)
	}
	body := `{"action":"opened"}`
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte(body))
	sig := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	var resp string
	h.Eventually("the added source takes a signed delivery", func() bool {
		var code int
		code, resp, _ = hosttest.Post(t, s.url+"/hooks/gh", body, map[string]string{"X-Hub-Signature-256": sig})
		return code == 202
	})
	id := hosttest.Decode[map[string]string](t, []byte(resp))["id"]
	job := s.flowEnds(id, 1)[0]
	if job.Function != "onpush" {
		t.Fatalf("the delivery's flow holds a job of %s", job.Function)
	}

	s.do("open the Webhooks page", chromedp.Navigate(s.url+"/webhooks"), chromedp.WaitVisible(`tr[data-source="gh"]`))
	if u := get(s, "read the URL", chromedp.Text(`tr[data-source="gh"] code.hook-url`)); u != s.url+"/hooks/gh" {
		t.Fatalf("the URL shown is %q, want %q", u, s.url+"/hooks/gh")
	}
	if a := get(s, "read the auth", chromedp.Text(`tr[data-source="gh"] td.auth`)); a != "hmac" {
		t.Fatalf("the auth shown is %q", a)
	}
	if k := get(s, "read the key", chromedp.Text(`tr[data-source="gh"] td.key`)); k != "gh-key" {
		t.Fatalf("gh's key cell says %q, want only its name", k)
	}
	if k := get(s, "read the missing key", chromedp.Text(`tr[data-source="alerts"].key-missing td.key`)); !strings.Contains(k, "missing: deliveries get 503") {
		t.Fatalf("alerts' key cell says %q", k)
	}
	s.screenshot("webhooks")
	s.do("follow the delivery", chromedp.Click(`tr[data-source="gh"] li[data-delivery="`+id+`"] a`), chromedp.WaitVisible(`a[href="/jobs/`+job.ID+`"]`))
	s.do("open its job", chromedp.Click(`table a[href="/jobs/`+job.ID+`"]`), chromedp.WaitVisible(`#job-status`))
	if st := get(s, "read the job's status", chromedp.Text(`#job-status`)); st != "succeeded" {
		t.Fatalf("the delivery's job is %q", st)
	}
	if e := h.WaitLog("webhook source's key is missing: its deliveries get 503 until it is set", 0); e.ContextMap()["source"] != "alerts" {
		t.Fatalf("the missing key's warning names %v", e.ContextMap())
	}
	noValueIn(t, h, key)
}

// The agent templates as they are (functions/codex.ts, claude.ts), served by a real host: the
// Secrets page lists the secrets their sealed env: lines name, missing until set (Codex's
// openai was never listed), and the functions table shows them, marked missing; once set on
// the page, they are stored and the mark is gone.
func TestSealedSecretsAreListed(t *testing.T) {
	files := map[string]string{}
	for _, name := range []string{"codex.ts", "claude.ts"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "functions", name))
		if err != nil {
			t.Fatal(err)
		}
		files[name] = string(b)
	}
	files["wordcount.ts"] = "export function main(text: string) { return text.split(/\\s+/).length }\n" // claude.ts's tool
	h := hosttest.New(t, files)
	s := openSite(t, h, h.Web())
	row := func(name string) string {
		return get(s, "read the row of "+name, chromedp.Text(`tr[data-secret="`+name+`"]`))
	}
	s.do("open the secrets", chromedp.Navigate(s.url+"/secrets"), chromedp.WaitVisible(`tr[data-secret="openai"]`))
	for name, fn := range map[string]string{"openai": "codex", "anthropic": "claude"} {
		if r := row(name); !strings.Contains(r, "missing") || !strings.Contains(r, fn) || !strings.Contains(r, "sealed") {
			t.Errorf("the row of %s reads %q; want it sealed, missing, declared by %s", name, r, fn)
		}
	}
	if n := get(s, "count the rows", chromedp.Evaluate[int](`document.querySelectorAll("tr[data-secret]").length`)); n != 2 {
		t.Errorf("%d secret rows, want openai and anthropic (claude's sealed anthropic.apiKey is a field of anthropic)", n)
	}
	s.do("open the functions", chromedp.Navigate(s.url+"/functions"), chromedp.WaitVisible(`tr[data-function="codex"]`))
	if r := get(s, "read codex's row", chromedp.Text(`tr[data-function="codex"]`)); !strings.Contains(r, "openai (sealed, missing)") {
		t.Errorf("codex's row %q lacks openai (sealed, missing)", r)
	}
	if r := get(s, "read claude's row", chromedp.Text(`tr[data-function="claude"]`)); !strings.Contains(r, "anthropic (missing)") || !strings.Contains(r, "anthropic.apiKey (sealed, missing)") {
		t.Errorf("claude's row %q lacks its secrets, missing", r)
	}
	s.screenshot("functions-sealed-missing")

	s.do("set openai", chromedp.Navigate(s.url+"/secrets"), chromedp.WaitVisible(`tr[data-secret="openai"] form.secret-rotate`),
		chromedp.SendKeys(`tr[data-secret="openai"] form.secret-rotate input[name=value]`, "sk-test-openai-key-1234"),
		chromedp.Click(`tr[data-secret="openai"] form.secret-rotate button`), chromedp.WaitVisible(`p.done`))
	if r := row("openai"); strings.Contains(r, "missing") || !strings.Contains(r, "yes") {
		t.Errorf("after setting it, openai's row reads %q; want it stored", r)
	}
	s.do("open the functions again", chromedp.Navigate(s.url+"/functions"), chromedp.WaitVisible(`tr[data-function="codex"]`))
	if r := get(s, "read codex's row", chromedp.Text(`tr[data-function="codex"]`)); !strings.Contains(r, "openai (sealed)") || strings.Contains(r, "missing") {
		t.Errorf("codex's row %q: want openai (sealed), no longer missing", r)
	}
	noValueIn(t, h, "sk-test-openai-key-1234")
}
