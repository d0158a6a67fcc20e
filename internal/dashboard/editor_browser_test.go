package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/deploy"
	"github.com/agenthost/host/internal/people"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// greetV is a jailed greet whose answer names its version.
func greetV(v string) string {
	return "# sandbox\n# timeout: 30s\n\ndef main(name: str = \"world\"):\n    print(\"draft log line " + v + "\")\n    return {\"greeting\": \"hello \" + name, \"version\": \"" + v + "\"}\n"
}

// setDraft replaces the editor's text through CodeMirror, as typing does.
func setDraft(s *site, src string) {
	s.t.Helper()
	b, _ := json.Marshal(src)
	s.do("write in the editor", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => { const v = document.getElementById("editor").editor.view;
		v.dispatch({changes: {from: 0, to: v.state.doc.length, insert: %s}}); })()`, b)))
}

// callVersion asks agent.call.greet, as `host invoke` does, and returns the version answering.
func callVersion(t *testing.T, h *hosttest.H, fn string) string {
	t.Helper()
	reply := h.Call(fn, `{"name":"cli"}`)
	var out struct {
		Version  string `json:"version"`
		Greeting string `json:"greeting"`
	}
	if err := json.Unmarshal(reply.Data, &out); err != nil {
		t.Fatalf("agent.call.%s answered %q: %v", fn, reply.Data, err)
	}
	return out.Version + out.Greeting
}

func waitDeployment(t *testing.T, h *hosttest.H, n int) {
	t.Helper()
	h.Eventually(fmt.Sprintf("the host serves deployment %d", n), func() bool { return h.Host.Deployment() == n })
}

// In the browser, on a host serving deployments: the editor of a deployed function marks a
// syntax error as it is typed (gutter and file:line list), passes once fixed, test-runs the
// draft in a real jail with the form's argument (the draft answers, its log and run time
// shown, while agent.call.greet still runs the deployed version), deploys it with a message
// (a new deployment, which agent.call then runs), and a New function from the template is
// deployed and called.
func TestEditorWritesTestRunsAndDeploys(t *testing.T) {
	findChromium(t)
	h := hosttest.New(t, nil, func(c *app.Config) { c.Deployed = true })
	js, _ := jetstream.New(h.NC)
	st, err := deploy.Open(context.Background(), js, 0)
	if err != nil {
		t.Fatal(err)
	}
	d1 := deploySet(t, st, "v1", map[string]string{"greet.py": greetV("v1")})
	waitDeployment(t, h, d1.Number)
	s := openSite(t, h, h.Web())

	s.do("open the editor", chromedp.Navigate(s.url+"/functions/greet"), chromedp.WaitVisible(`#editor-code`),
		chromedp.WaitVisible(`#editor[data-problems="0"]`))
	setDraft(s, strings.Replace(greetV("v2"), "def main(name: str = \"world\"):", "def main(name: str = \"world\"", 1))
	s.do("see the syntax error", chromedp.WaitVisible(`#editor[data-problems="1"]`))
	// The marker is in the editor's shadow root, drawn (a size of its own) on the bad line.
	marked := get(s, "see the syntax error marked", chromedp.Poll[string](`(() => {
		const m = document.getElementById("editor-code").shadowRoot.querySelector(".cm-lint-marker-error");
		return m && m.getBoundingClientRect().width > 0 && document.getElementById("editor-code").shadowRoot.querySelectorAll(".cm-lintRange-error").length + " marked" })()`))
	if marked != "1 marked" {
		t.Fatalf("the syntax error is %q in the editor, want one range marked", marked)
	}
	listed := get(s, "read the problems", chromedp.Text(`#editor-problems`))
	if !strings.HasPrefix(listed, "greet.py:4 ") {
		t.Fatalf("the problems list %q, want greet.py:4 first", listed)
	}
	s.do("scroll to the editor", chromedp.ScrollIntoView(`#editor`))
	s.screenshot("editor-syntax-error")
	setDraft(s, greetV("v2"))
	s.do("see it pass", chromedp.WaitVisible(`#editor[data-problems="0"]`))

	s.do("test-run it", chromedp.SendKeys(`#arg-name`, "Ada"), chromedp.Click(`#editor-test`),
		chromedp.WaitVisible(`#draft-out[data-status="succeeded"]`))
	result := get(s, "read the result", chromedp.Text(`#draft-result`))
	if !strings.Contains(result, `"version": "v2"`) || !strings.Contains(result, "hello Ada") {
		t.Fatalf("the test run's result %q, want the draft's (v2) greeting Ada", result)
	}
	if log := get(s, "read the log", chromedp.Text(`#draft-log`)); !strings.Contains(log, "draft log line v2") {
		t.Fatalf("the test run's log %q lacks the draft's line", log)
	}
	if took := get(s, "read the run time", chromedp.Text(`#draft-time`)); !strings.HasPrefix(took, "in ") {
		t.Fatalf("the test run shows no run time: %q", took)
	}
	if got := callVersion(t, h, "greet"); got != "v1hello cli" {
		t.Fatalf("after the test run agent.call.greet answered %q, want the deployed v1", got)
	}
	s.do("scroll to the editor", chromedp.ScrollIntoView(`#editor-actions`))
	s.screenshot("editor-test-run")

	s.do("deploy it", chromedp.SendKeys(`#editor-message`, "greet v2 from the editor"), chromedp.Click(`#editor-deploy`),
		chromedp.WaitVisible(`#editor[data-deployed]`))
	said := get(s, "read what deploy said", chromedp.Text(`#editor-said`))
	cur, err := st.Current(context.Background())
	if err != nil || cur.Number != d1.Number+1 || cur.Message != "greet v2 from the editor" || !strings.Contains(said, fmt.Sprintf("deployment %d stored", cur.Number)) {
		t.Fatalf("after Deploy: current %+v %v, page said %q", cur, err, said)
	}
	waitDeployment(t, h, cur.Number)
	if got := callVersion(t, h, "greet"); got != "v2hello cli" {
		t.Fatalf("after the deploy agent.call.greet answered %q, want v2", got)
	}
	s.screenshot("editor-deployed")

	s.do("open New function", chromedp.Navigate(s.url+"/functions"), chromedp.Click(`#new-function`), chromedp.WaitVisible(`#new-name`),
		chromedp.SendKeys(`#new-name`, "fresh"), chromedp.SetValue(`#new-lang`, "ts"), chromedp.Click(`#new-open`),
		chromedp.WaitVisible(`#editor[data-new][data-problems="0"]`))
	if src := get(s, "read the template", chromedp.Evaluate[string](`document.getElementById("editor").editor.value()`)); !strings.Contains(src, "export async function main(name: string") {
		t.Fatalf("New function opened %q, not host new's TypeScript template", src)
	}
	s.screenshot("editor-new-function")
	s.do("deploy the new function", chromedp.Click(`#editor-deploy`), chromedp.WaitVisible(`#editor[data-deployed]`))
	waitDeployment(t, h, cur.Number+1)
	if got := string(h.Call("fresh", `{"name":"Ada"}`).Data); got != `{"greeting":"Hello, Ada!"}` {
		t.Fatalf("the new function answered %q", got)
	}
	if got := callVersion(t, h, "greet"); got != "v2hello cli" {
		t.Fatalf("deploying fresh changed greet: %q", got)
	}
}

// A bad annotation is refused on Deploy with its file:line, and nothing is deployed; a draft
// over the size limit is refused 413 naming the limit; a viewer and a runner are refused 403
// on test run and deploy.
func TestEditorRefuses(t *testing.T) {
	ps := newPeopleSite(t, map[string]string{"greet.py": "def main(name: str = \"world\"):\n    return name\n"}, nil, nil)
	ps.do("open the editor as the operator", chromedp.Navigate(ps.url+"/login"), chromedp.WaitVisible(`#token`),
		chromedp.SendKeys(`#token`, operatorToken), chromedp.Click(`button[type=submit]`), chromedp.WaitVisible(`#me-name`),
		chromedp.Navigate(ps.url+"/functions/greet"), chromedp.WaitVisible(`#editor[data-problems="0"]`))
	setDraft(ps.site, "# sandbox\n# timeout: soon\ndef main(name: str = \"world\"):\n    return 'changed'\n")
	ps.do("see the annotation marked", chromedp.WaitVisible(`#editor[data-problems="1"]`))
	ps.do("deploy it anyway", chromedp.Click(`#editor-deploy`), chromedp.WaitVisible(`#editor-error:not(:empty)`))
	said := get(ps.site, "read the refusal", chromedp.Text(`#editor-error`))
	if !strings.Contains(said, "deploy refused") || !strings.Contains(said, "greet.py:2: ") || !strings.Contains(said, "soon") {
		t.Fatalf("the refused deploy says %q, want greet.py:2 and the bad value", said)
	}
	ps.do("scroll to the editor", chromedp.ScrollIntoView(`#editor`))
	ps.screenshot("editor-annotation-refused")
	if src, _ := os.ReadFile(ps.h.FnDir + "/greet.py"); strings.Contains(string(src), "changed") {
		t.Fatal("a refused draft was written into the functions directory")
	}

	// On a host serving a directory, Deploy writes the file there, which the host reloads.
	setDraft(ps.site, "def main(name: str = \"world\"):\n    return 'written by the editor'\n")
	ps.do("deploy into the directory", chromedp.WaitVisible(`#editor[data-problems="0"]`), chromedp.Click(`#editor-deploy`),
		chromedp.WaitVisible(`#editor[data-deployed]`))
	if said := get(ps.site, "read what deploy said", chromedp.Text(`#editor-said`)); !strings.Contains(said, "written to "+ps.h.FnDir+"/greet.py") {
		t.Fatalf("Deploy on a directory host said %q", said)
	}
	if src, _ := os.ReadFile(ps.h.FnDir + "/greet.py"); !strings.Contains(string(src), "written by the editor") {
		t.Fatalf("the functions directory holds %q after Deploy", src)
	}

	big := strings.Repeat("# padding\n", 30<<10) + "def main():\n    return 1\n"
	status := postDraft(ps.site, "greet", "deploy", big)
	if !strings.HasPrefix(status, "413 ") || !strings.Contains(status, "262144 bytes") {
		t.Fatalf("a draft over the limit: %q, want 413 naming the limit", status)
	}
	ps.logout()
	for _, who := range []struct {
		name string
		role people.Role
	}{{"vic", people.Viewer}, {"rob", people.Runner}} {
		ps.loginWith(ps.add(who.name, who.role))
		ps.do("open greet as "+who.name, chromedp.Navigate(ps.url+"/functions/greet"), chromedp.WaitVisible(`#fn-source`))
		if present(ps.site, `#editor`) {
			t.Fatalf("%s (%s) is shown the editor", who.name, who.role)
		}
		for _, act := range []string{"test", "deploy", "check"} {
			got := postDraft(ps.site, "greet", act, "def main():\n    return 'mine'\n")
			if !strings.HasPrefix(got, "403 ") || !strings.Contains(got, "developer") {
				t.Fatalf("%s's %s: %q, want 403 naming the developer role", who.name, act, got)
			}
		}
		ps.logout()
	}
}

// postDraft posts source to /functions/{fn}/{act} from the page, as its script does, and
// returns "<status> <error>".
func postDraft(s *site, fn, act, source string) string {
	s.t.Helper()
	b, _ := json.Marshal(source)
	return get(s, act+" "+fn, chromedp.Evaluate[string](fmt.Sprintf(`(async () => {
		const r = await fetch("/functions/%s/%s", {method: "POST", credentials: "same-origin", headers: {Accept: "application/json"},
			body: new URLSearchParams({source: %s, lang: "py"})});
		const text = await r.text(); let e = text; try { e = JSON.parse(text).error || text } catch (_) {}
		return r.status + " " + e; })()`, fn, act, b), awaitPromise))
}
