package dashboard_test

// What a new user tripped on in the dashboard (issue 42, section 3), each as what they did, in
// a real Chromium: the run form's required fields and argument shapes, a job page's times and
// layout, an approval step's wait, and the pages shown before a login.

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/web"
	"github.com/agenthost/host/internal/webauth"
)

// The user pressed Run with a required field empty and the job failed. Now the page refuses
// it before anything is sent, with one message, at the field (not a second copy under the
// form), and focuses it; the form's handler refuses it too, in the same words; filled, it runs.
func TestRunFormRequiredField(t *testing.T) {
	s := newSite(t, map[string]string{"need.py": "def main(name: str, times: int = 1):\n    return name * times\n"}, fakeRunner{})
	const want = `argument "name" is required (main has no default for it): fill it in`
	s.do("open the function", chromedp.Navigate(s.url+"/functions/need"), chromedp.WaitVisible(`#run-form`))
	if shown := get(s, "read the errors before anything", chromedp.Evaluate[string](`document.querySelector(".field[data-param=name] .field-error").textContent`)); shown != "" {
		t.Fatalf("a form only opened already says %q", shown)
	}
	s.do("press Run with name empty", chromedp.Click(`#run-button`), chromedp.WaitVisible(`.field[data-param="name"] .field-error`))
	if where := get(s, "where", chromedp.Location()); where != s.url+"/functions/need" {
		t.Fatalf("the form was sent with a required field empty: the browser is at %s", where)
	}
	if msg := get(s, "read the field's error", chromedp.Text(`.field[data-param="name"] .field-error`)); msg != want {
		t.Fatalf("the field says %q, want %q", msg, want)
	}
	errs := get(s, "list the errors shown", chromedp.Evaluate[[]string](
		`Array.from(document.querySelectorAll("#run-form .error")).filter(e => e.textContent.trim() !== "").map(e => e.textContent)`))
	if len(errs) != 1 {
		t.Fatalf("the page shows %d errors %q, want the one at the field", len(errs), errs)
	}
	if focus := get(s, "read the focus", chromedp.Evaluate[string](`document.activeElement.id`)); focus != "arg-name" {
		t.Fatalf("the focus is on %q, want the empty field", focus)
	}
	s.screenshot("run-form-required")
	if recs, err := s.h.Store.Recent(context.Background(), jobs.Filter{Function: "need"}, 0); err != nil || len(recs) != 0 {
		t.Fatalf("jobs of need: %v %v, want none", recs, err)
	}
	code, body := postForm(t, s.url+"/functions/need/run", url.Values{"arg.times": {"2"}})
	if code != http.StatusBadRequest || strings.TrimSpace(body) != want {
		t.Fatalf("the form posted without name: %d %q, want 400 %q", code, body, want)
	}

	s.do("fill it and run", chromedp.SendKeys(`#arg-name`, "ab"), chromedp.Click(`#run-wait`), chromedp.WaitVisible(`#run-out[data-status="succeeded"]`))
	if errs := get(s, "list the errors left", chromedp.Evaluate[[]string](
		`Array.from(document.querySelectorAll("#run-form .error")).filter(e => e.textContent.trim() !== "").map(e => e.textContent)`)); len(errs) != 0 {
		t.Fatalf("errors %q stay after the field was filled", errs)
	}
}

// claude.ts's arguments: `agent_instructions?: AgentInstructions` (a Record<string, string>
// by a type alias) got a one-line text box, and `anthropic?: RT.Anthropic` no hint of what it
// is. Now the alias is read as its type, a multi-line JSON object editor showing its shape,
// and the resource an object editor naming the fields main reads of it.
func TestRunFormShowsArgumentShapes(t *testing.T) {
	const src = "// secrets: anthropic\n" +
		"type AgentInstructions = Record<string, string>\n\n" +
		"export async function main(\n  anthropic?: RT.Anthropic,\n  agent_instructions?: AgentInstructions,\n) {\n" +
		"  if (anthropic?.apiKey) process.env.ANTHROPIC_API_KEY = anthropic.apiKey;\n  return agent_instructions\n}\n"
	s := newSite(t, map[string]string{"claude.ts": src}, fakeRunner{
		"claude": func(_ context.Context, j *jobtype.Job) *jobtype.Outcome { return &jobtype.Outcome{Result: j.Payload} },
	})
	s.do("open the function", chromedp.Navigate(s.url+"/functions/claude"), chromedp.WaitVisible(`#run-form`))
	tag := func(sel string) string {
		return get(s, "the element "+sel, chromedp.Evaluate[string](`document.querySelector("`+sel+`").tagName + " " + (document.querySelector("`+sel+`").placeholder || "")`))
	}
	if got := tag("#arg-agent_instructions"); got != `TEXTAREA {"key":"text"}` {
		t.Errorf("agent_instructions is asked with %q, want a textarea showing {\"key\":\"text\"}", got)
	}
	if label := get(s, "read its label", chromedp.Text(`.field[data-param="agent_instructions"] label`)); !strings.Contains(label, "AgentInstructions = Record<string, string>") {
		t.Errorf("its label %q does not say what the alias stands for", label)
	}
	if got := tag("#arg-anthropic"); got != `TEXTAREA {"apiKey":"…"}` {
		t.Errorf("anthropic is asked with %q, want a textarea showing {\"apiKey\":\"…\"}", got)
	}
	hint := get(s, "read anthropic's hint", chromedp.Text(`.field[data-param="anthropic"] .field-hint`))
	for _, w := range []string{"RT.Anthropic is a Windmill resource type", "apiKey", "secret"} {
		if !strings.Contains(hint, w) {
			t.Errorf("anthropic's hint %q lacks %q", hint, w)
		}
	}
	s.screenshot("run-form-shapes")

	s.do("type a word for the instructions", chromedp.SendKeys(`#arg-agent_instructions`, "notes"))
	if msg := get(s, "read the field's error", chromedp.Text(`.field[data-param="agent_instructions"] .field-error`)); !strings.Contains(msg, `expected AgentInstructions, got string "notes"`) {
		t.Fatalf("the page says %q for a word where an object goes", msg)
	}
	s.do("write an object over lines, and the key", chromedp.SetValue(`#arg-agent_instructions`, "{\n  \"CLAUDE.md\": \"be brief\",\n  \"skills/a.md\": \"x\"\n}"),
		chromedp.SendKeys(`#arg-anthropic`, `{"apiKey":"k"}`), chromedp.Click(`#run-wait`), chromedp.WaitVisible(`#run-out[data-status="succeeded"]`))
	got := decodeJSON(t, []byte(get(s, "read the result", chromedp.Text(`#run-result`))))
	if ai, _ := got["agent_instructions"].(map[string]any); ai["CLAUDE.md"] != "be brief" || got["anthropic"].(map[string]any)["apiKey"] != "k" {
		t.Fatalf("the job got %v", got)
	}
}

// A job's page as its job runs, waits for a decision, and ends: the log on the first screen,
// sized to its content; a running job's run time counting up; a waiting step showing no
// "Finished", its run and its wait for a person apart; and, once decided, its run time
// without the wait, here and on the flow's timeline.
func TestJobPageTimesAndLayout(t *testing.T) {
	release := make(chan struct{})
	s := newSite(t, map[string]string{"build.sh": "echo\n", "plan.sh": "# approve\n# next: agent.run.apply\necho\n", "apply.sh": "echo\n"}, fakeRunner{
		"build": func(ctx context.Context, j *jobtype.Job) *jobtype.Outcome {
			for i := range 3 {
				j.Log("stdout", []byte("step "+strconv.Itoa(i)))
			}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return &jobtype.Outcome{Result: []byte(`{"built":true}`)}
		},
		"plan": func(context.Context, *jobtype.Job) *jobtype.Outcome {
			return &jobtype.Outcome{Result: []byte(`{"change":"x"}`)}
		},
	})
	defer close(release)

	// Running: the run time ticks, no Finished, the log at the top and as tall as its lines.
	s.publish("build", "build-1", `{}`)
	s.h.Eventually("build-1 runs", func() bool {
		rec, err := s.h.Store.Get(context.Background(), "build-1")
		return err == nil && rec.Status == jobtype.Running
	})
	s.do("open the running job", chromedp.Navigate(s.url+"/jobs/build-1"), chromedp.WaitVisible(`#job-log .line[data-n="3"]`),
		chromedp.WaitVisible(`#job-run[data-ticks="3"]`))
	// Three ticks are two seconds apart at least: the time shown has moved from the start.
	if ran := get(s, "read the run time", chromedp.Text(`#job-run`)); parseDur(t, ran) < 2*time.Second {
		t.Fatalf("after three ticks the run time says %q, want at least 2s", ran)
	}
	if n := get(s, "look for Finished", chromedp.Evaluate[int](`document.querySelectorAll("#job-finished").length`)); n != 0 {
		t.Fatal("a running job shows a Finished time")
	}
	box := get(s, "measure the log", chromedp.Evaluate[map[string]float64](`(() => { const r = document.getElementById("job-log").getBoundingClientRect();
		const l = document.querySelector("#job-log .line").getBoundingClientRect().height;
		return {top: r.top, height: r.height, line: l, screen: window.innerHeight}; })()`))
	if box["top"] > box["screen"]/3 {
		t.Errorf("the log starts at %.0fpx of a %.0fpx window: below the first third", box["top"], box["screen"])
	}
	if box["height"] > 3*box["line"]+box["line"] {
		t.Errorf("the log of 3 lines is %.0fpx tall (a line is %.0fpx): not sized to its content", box["height"], box["line"])
	}
	s.screenshot("job-running")

	// Waiting for a decision: no Finished, its run ended, its wait counting up.
	s.publish("plan", "plan-w", `{}`)
	s.h.Eventually("plan-w waits for a decision", func() bool {
		rec, err := s.h.Store.Get(context.Background(), "plan-w")
		return err == nil && rec.Status == jobtype.Waiting
	})
	if rec, _ := s.h.Store.Get(context.Background(), "plan-w"); rec.RunEnded.IsZero() || rec.RunEnded.Before(rec.Started) {
		t.Fatalf("the waiting step's record has no run end: %+v", rec)
	}
	s.do("open the waiting step", chromedp.Navigate(s.url+"/jobs/plan-w"), chromedp.WaitVisible(`#approve`),
		chromedp.WaitVisible(`#job-decision-wait[data-ticks="2"]`))
	if n := get(s, "look for Finished", chromedp.Evaluate[int](`document.querySelectorAll("#job-finished").length`)); n != 0 {
		t.Fatal("a step waiting for a decision shows a Finished time")
	}
	if n := get(s, "look for the run's end", chromedp.Evaluate[int](`document.querySelectorAll("#job-run-ended").length`)); n != 1 {
		t.Fatal("a waiting step does not say when its run ended")
	}
	if ran := get(s, "read the run time", chromedp.Evaluate[string](`document.getElementById("job-run").dataset.since || ""`)); ran != "" {
		t.Fatal("a waiting step's run time still counts up: its run has ended")
	}
	s.screenshot("job-waiting-for-approval")

	// Decided, a second after its run at least (two ticks): the run time leaves the wait out.
	s.do("approve it", chromedp.Click(`#approve`), chromedp.WaitVisible(`#approval`))
	rec := s.h.Record("plan-w")
	total := rec.Finished.Sub(rec.Started)
	if rec.RunEnded.IsZero() || rec.Finished.Sub(rec.RunEnded) < time.Second {
		t.Fatalf("the decided record: run ended %v, decided %v; want the decision a second after the run at least", rec.RunEnded, rec.Finished)
	}
	ran := parseDur(t, get(s, "read the run time", chromedp.Text(`#job-run`)))
	if ran > total-time.Second {
		t.Fatalf("the page says it ran %v of its %v, which includes the wait for a decision (%v)", ran, total, rec.Finished.Sub(rec.RunEnded))
	}
	if wait := parseDur(t, get(s, "read the decision wait", chromedp.Text(`#job-decision-wait`))); wait < time.Second {
		t.Fatalf("the page says the decision took %v, want a second at least", wait)
	}
	if label := get(s, "read the end's label", chromedp.Evaluate[string](`document.getElementById("job-finished").previousElementSibling.textContent`)); label != "Decided" {
		t.Fatalf("the decided step's end is labelled %q", label)
	}
	s.screenshot("job-decided")

	s.do("open the flow", chromedp.Navigate(s.url+"/flows/plan-w"), chromedp.WaitVisible(`g.step[data-job="plan-w"] rect.decision`))
	bars := get(s, "measure the bars", chromedp.Evaluate[map[string]float64](`(() => { const g = document.querySelector('g.step[data-job="plan-w"]');
		const b = g.querySelector("rect.bar"), d = g.querySelector("rect.decision");
		return {barEnd: +b.getAttribute("x") + +b.getAttribute("width"), decX: +d.getAttribute("x"), decW: +d.getAttribute("width")}; })()`))
	if bars["decW"] <= 0 || bars["barEnd"] > bars["decX"]+0.2 {
		t.Fatalf("the flow draws the run to %.1f and the decision from %.1f, %.1f wide: want the run to end where the wait starts", bars["barEnd"], bars["decX"], bars["decW"])
	}
	s.screenshot("flow-decision")

	// The build ends: its page shows Finished.
	release <- struct{}{}
	s.h.Record("build-1")
	s.do("open the finished job", chromedp.Navigate(s.url+"/jobs/build-1"), chromedp.WaitVisible(`#log-end[data-status="succeeded"]`), chromedp.WaitVisible(`#job-finished`))
	s.screenshot("job-finished")
	fullScreenshot(s, "job-finished-full")
}

// parseDur reads a duration as the page shows it ("2m56s", "17.123ms").
func parseDur(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		t.Fatalf("the page shows %q, not a duration: %v", s, err)
	}
	return d
}

// The login page was unstyled and named ~/.config/host/http.token although the host read its
// token elsewhere; a signed link's page was unstyled too. Both now wear the dashboard's look
// (its top bar), and the login page names the file the host reads.
func TestLoginAndLinkPagesStyled(t *testing.T) {
	const token = "a-long-enough-test-token-0123456789"
	findChromium(t)
	h := hosttest.NewEngine(t, map[string]string{"hello.sh": "echo\n"}, fakeRunner{})
	// As serve builds it: the signed links outside the guard, the rest behind it.
	cfg := h.WebConfig()
	cfg.Auth = webauth.Config{Token: token, Loopback: true, TokenFile: "/srv/agent/web.token"}
	s := openSite(t, h, web.New(cfg))

	barColour := `getComputedStyle(document.querySelector("header.bar") || document.body).backgroundColor`
	s.do("open the dashboard", chromedp.Navigate(s.url+"/jobs"), chromedp.WaitVisible(`#token`))
	help := get(s, "read the login page", chromedp.Evaluate[string](`document.body.innerText`))
	if !strings.Contains(help, "/srv/agent/web.token") || strings.Contains(help, "~/.config/host/http.token") {
		t.Fatalf("the login page says %q; want it to name /srv/agent/web.token, the file the host reads, and no other", help)
	}
	if bg := get(s, "read the bar's colour", chromedp.Evaluate[string](barColour)); bg != "rgb(36, 52, 71)" {
		t.Fatalf("the login page's bar is %s, want the dashboard's rgb(36, 52, 71): unstyled", bg)
	}
	if font := get(s, "read the font", chromedp.Evaluate[string](`getComputedStyle(document.body).fontFamily`)); !strings.Contains(font, "system-ui") {
		t.Fatalf("the login page's font is %q, not the dashboard's", font)
	}
	s.screenshot("login")

	s.do("open a link that is not signed", chromedp.Navigate(s.url+"/approvals/some-job?decision=approve&expires=1&sig=forged"), chromedp.WaitVisible(`#link-text`))
	if bg := get(s, "read the bar's colour", chromedp.Evaluate[string](barColour)); bg != "rgb(36, 52, 71)" {
		t.Fatalf("the signed link's page's bar is %s: unstyled", bg)
	}
	s.screenshot("approval-link")

	s.do("log in", chromedp.Navigate(s.url+"/jobs"), chromedp.WaitVisible(`#token`), chromedp.SendKeys(`#token`, token), chromedp.Submit(`#token`), chromedp.WaitVisible(`nav`))
}
