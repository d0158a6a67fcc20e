package dashboard_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/audit"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/people"
	"github.com/agenthost/host/internal/schedule"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// submitRaw fills form's fields by name and submits it without the browser's own checks
// (pattern, required), so that what reaches the server is what a hand-made POST would send.
func (s *site) submitRaw(form string, fields map[string]string) {
	s.t.Helper()
	b, _ := json.Marshal(fields)
	s.do("find "+form, chromedp.WaitVisible(form))
	get(s, "submit "+form, chromedp.Evaluate[bool](`(() => { window.submitted = true; document.querySelectorAll("p.form-error, p.done").forEach(e => e.remove());
		const f = document.querySelector(`+"`"+form+"`"+`); f.noValidate = true;
		for (const [k, v] of Object.entries(`+string(b)+`)) { f.elements[k].value = v; } f.requestSubmit(); return true; })()`))
}

// setField sets a field's value as typing would, input event included.
func (s *site) setField(sel, v string) {
	s.t.Helper()
	b, _ := json.Marshal(v)
	get(s, "set "+sel, chromedp.Evaluate[bool](`(() => { const e = document.querySelector(`+"`"+sel+"`"+`); e.value = `+string(b)+`;
		e.dispatchEvent(new Event("input", {bubbles: true})); return true; })()`))
}

// formError waits for the page after a refused form (a new document: submitRaw marks the old
// one) and returns what it says.
func (s *site) formError() string {
	s.t.Helper()
	said := ""
	s.h.Eventually("the refused form's page", func() bool {
		ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
		defer cancel()
		var err error
		said, err = chromedp.Run(ctx, chromedp.Evaluate[string](`(() => { const e = document.querySelector("p.form-error");
			return !window.submitted && document.readyState === "complete" && e ? e.textContent : ""; })()`))
		return err == nil && said != ""
	})
	return said
}

func (s *site) pageHTML() string {
	return get(s, "read the page", chromedp.Evaluate[string](`document.documentElement.outerHTML`))
}

func webAudit(t *testing.T, c *client.Client) []string {
	t.Helper()
	entries, err := audit.Read(context.Background(), c.JS, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var acts []string
	for _, e := range entries {
		if e.Face == "web" {
			acts = append(acts, e.Act+" "+e.Target+errMark(e.Error))
		}
	}
	return acts
}

func sign(key, body string) string {
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte(body))
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// A webhook source made on the Webhooks page takes a delivery signed with the key typed once,
// which runs the function on webhook.<source>; a wrongly signed one gets 401; the key is never
// on a page again. Bad input is refused in the CLI's words; an edit rotates the key and the
// auth; a removed source answers 404.
func TestWebhookFromThePage(t *testing.T) {
	h := hosttest.New(t, map[string]string{"onpush.sh": "# on: webhook.gh\ncat >/dev/null\necho '{\"seen\":true}'\n"})
	s := openSite(t, h, h.Web())
	const key, token = "page-made-hmac-key-0042", "page-made-bearer-token-0043"

	s.do("open the form", chromedp.Navigate(s.url+"/webhooks"), chromedp.WaitVisible(`form.hook-form`))
	s.screenshot("webhook-form")
	s.submitRaw(`form.hook-form`, map[string]string{"name": "gh", "auth": "hmac"})
	if got := s.formError(); !strings.Contains(got, "hmac needs a key") {
		t.Fatalf("a source without its key: %q", got)
	}
	s.submitRaw(`form.hook-form`, map[string]string{"name": "a/b", "auth": "hmac", "key": key})
	if got := s.formError(); got != `webhook source "a/b": a name is 1 to 64 letters, digits, - and _` {
		t.Fatalf("an unsafe name: %q", got)
	}
	s.submitRaw(`form.hook-form`, map[string]string{"name": "gh", "auth": "hmac", "key": "abc"})
	if got := s.formError(); !strings.Contains(got, "shorter than 4") {
		t.Fatalf("a short key: %q", got)
	}
	s.do("add gh", chromedp.Navigate(s.url+"/webhooks"), chromedp.WaitVisible(`form.hook-form`),
		chromedp.SendKeys(`form.hook-form input[name=name]`, "gh"), chromedp.SendKeys(`form.hook-form input[name=key]`, key),
		chromedp.Click(`form.hook-form button`), chromedp.WaitVisible(`p.done`))
	if page := s.pageHTML(); strings.Contains(page, key) {
		t.Fatal("the page shows the key after adding it")
	}
	if u := get(s, "read the URL", chromedp.Text(`tr[data-source="gh"] code.hook-url`)); u != s.url+"/hooks/gh" {
		t.Fatalf("the URL shown is %q", u)
	}
	if how := get(s, "read how to sign", chromedp.TextContent(`tr[data-source="gh"] details.how pre`)); !strings.Contains(how, "X-Hub-Signature-256: sha256=$sig") || !strings.Contains(how, "openssl dgst -sha256 -hmac") {
		t.Fatalf("how to send says %q", how)
	}
	s.do("open how to send", chromedp.Click(`tr[data-source="gh"] details.how summary`))
	s.screenshot("webhooks-added")

	body := `{"action":"opened"}`
	var resp string
	h.Eventually("the new source takes a signed delivery", func() bool {
		var code int
		code, resp, _ = hosttest.Post(t, s.url+"/hooks/gh", body, map[string]string{"X-Hub-Signature-256": sign(key, body)})
		return code == 202
	})
	if job := s.flowEnds(hosttest.Decode[map[string]string](t, []byte(resp))["id"], 1)[0]; job.Function != "onpush" || job.Status != jobtype.Succeeded {
		t.Fatalf("the delivery ran %s, %s", job.Function, job.Status)
	}
	if code, said, _ := hosttest.Post(t, s.url+"/hooks/gh", body, map[string]string{"X-Hub-Signature-256": sign("another-key-entirely", body)}); code != 401 {
		t.Fatalf("a wrongly signed delivery: %d %s", code, said)
	}

	s.do("open it again", chromedp.Navigate(s.url+"/webhooks"), chromedp.WaitVisible(`tr[data-source="gh"]`))
	s.submitRaw(`form.hook-form`, map[string]string{"name": "gh", "auth": "hmac", "key": key})
	if got := s.formError(); !strings.Contains(got, `webhook source "gh" exists already`) {
		t.Fatalf("a taken name: %q", got)
	}
	if strings.Contains(s.pageHTML(), key) {
		t.Fatal("the refused form shows the key back")
	}

	s.do("edit it to bearer", chromedp.Navigate(s.url+"/webhooks"), chromedp.Click(`tr[data-source="gh"] a.edit`), chromedp.WaitReady(`form.hook-form input[name=edit]`),
		chromedp.SetValue(`form.hook-form select[name=auth]`, "bearer"), chromedp.SendKeys(`form.hook-form input[name=key]`, token),
		chromedp.Click(`form.hook-form button`), chromedp.WaitVisible(`p.done`))
	if a := get(s, "read the auth", chromedp.Text(`tr[data-source="gh"] td.auth`)); a != "bearer" {
		t.Fatalf("after the edit the auth is %q", a)
	}
	h.Eventually("the edited source takes the bearer token", func() bool {
		code, _, _ := hosttest.Post(t, s.url+"/hooks/gh", body, map[string]string{"Authorization": "Bearer " + token})
		return code == 202
	})
	if strings.Contains(s.pageHTML(), token) {
		t.Fatal("the page shows the new token")
	}

	s.do("remove it", chromedp.Click(`tr[data-source="gh"] form.hook-remove button`), chromedp.WaitVisible(`p.done`), chromedp.WaitNotPresent(`tr[data-source="gh"]`))
	h.Eventually("the removed source answers 404", func() bool {
		code, _, _ := hosttest.Post(t, s.url+"/hooks/gh", body, map[string]string{"Authorization": "Bearer " + token})
		return code == 404
	})
	c, err := client.New(context.Background(), h.NC)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := webAudit(t, c), []string{"secret.set gh-key", "hook.add gh", "secret.set gh-key", "hook.add gh", "hook.rm gh"}; !slices.Equal(got, want) {
		t.Fatalf("the web face's audit: %q, want %q", got, want)
	}
	noValueIn(t, h, key, token)
}

// A schedule made on the Schedules page shows its next five ticks as it is typed, fires with
// the arguments it was given, and pauses and goes away from the page. Bad input is refused in
// the words of a schedule: line and of `host schedules add`.
func TestScheduleFromThePage(t *testing.T) {
	h := hosttest.New(t, map[string]string{"tick.sh": "cat\n"})
	s := openSite(t, h, h.Web())
	ctx := context.Background()

	s.do("type a schedule", chromedp.Navigate(s.url+"/schedules"), chromedp.WaitVisible(`form.schedule-form`),
		chromedp.SendKeys(`form.schedule-form input[name=name]`, "every-sec"), chromedp.SendKeys(`form.schedule-form input[name=function]`, "tick"),
		chromedp.SendKeys(`#schedule-expr`, "*/61 * * * *"), chromedp.WaitVisible(`#next-error`))
	want := "schedule: " + annot.CheckSchedule("*/61 * * * *").Error()
	if got := get(s, "read the schedule's error", chromedp.Text(`#next-error`)); got != want {
		t.Fatalf("as typed, a bad cron says %q, want %q", got, want)
	}
	s.setField(`#schedule-expr`, "")
	s.do("type a good one", chromedp.SendKeys(`#schedule-expr`, "@every 1s"), chromedp.WaitVisible(`#next-ticks li:nth-child(5)`))
	ticks := get(s, "read the next ticks", chromedp.Evaluate[[]string](`[...document.querySelectorAll("#next-ticks li")].map(li => li.textContent)`))
	if len(ticks) != 5 {
		t.Fatalf("next ticks: %q", ticks)
	}
	var prev time.Time
	for _, tk := range ticks {
		at, err := time.Parse("2006-01-02 15:04:05 MST", tk)
		if err != nil || !prev.IsZero() && at.Sub(prev) != time.Second {
			t.Fatalf("next ticks %q are not one second apart (%v)", ticks, err)
		}
		prev = at
	}
	s.setField(`form.schedule-form textarea[name=args]`, `{"who": "page"`)
	s.screenshot("schedule-form")
	s.do("submit bad JSON", chromedp.Click(`form.schedule-form button`), chromedp.WaitVisible(`p.form-error`))
	if got := s.formError(); !strings.Contains(got, "arguments must be a JSON object") {
		t.Fatalf("bad JSON: %q", got)
	}
	if v := get(s, "read the kept schedule", chromedp.Value(`#schedule-expr`)); v != "@every 1s" {
		t.Fatalf("the refused form lost its schedule: %q", v)
	}
	for _, bad := range []struct {
		fields map[string]string
		says   string
	}{
		{map[string]string{"name": "x", "function": "tick", "schedule": "*/61 * * * *", "args": "{}"}, "minute step 61 is out of range"},
		{map[string]string{"name": "../x", "function": "tick", "schedule": "@every 1s", "args": "{}"}, `schedule name "../x"`},
		{map[string]string{"name": "x", "function": "nope", "schedule": "@every 1s", "args": "{}"}, "function nope: no host serves it"},
		{map[string]string{"name": "x", "function": "tick", "schedule": "@every 1s", "args": "[1]"}, "arguments must be a JSON object"},
	} {
		s.submitRaw(`form.schedule-form`, bad.fields)
		if got := s.formError(); !strings.Contains(got, bad.says) {
			t.Fatalf("%v: the page says %q, want %q", bad.fields, got, bad.says)
		}
	}
	s.submitRaw(`form.schedule-form`, map[string]string{"name": "every-sec", "function": "tick", "schedule": "@every 1s", "args": `{"who": "page"}`})
	s.do("see it listed", chromedp.WaitVisible(`p.done`), chromedp.WaitVisible(`tr[data-schedule="every-sec"]`))

	var fired *jobs.Record
	h.Eventually("the schedule runs tick with its arguments", func() bool {
		recs, err := h.Store.Recent(ctx, jobs.Filter{Function: "tick"}, 0)
		for _, r := range recs {
			if err == nil && r.Status == jobtype.Succeeded {
				fired = r
				return true
			}
		}
		return false
	})
	if string(fired.Args) != `{"who":"page"}` || fired.StartedBy != "schedule every-sec" {
		t.Fatalf("the tick's job has args %s, started by %q", fired.Args, fired.StartedBy)
	}
	s.submitRaw(`form.schedule-form`, map[string]string{"name": "every-sec", "function": "tick", "schedule": "@every 1s", "args": "{}"})
	if got := s.formError(); !strings.Contains(got, "a schedule of that name exists") {
		t.Fatalf("a taken name: %q", got)
	}

	s.do("pause it", chromedp.Navigate(s.url+"/schedules"), chromedp.Click(`tr[data-schedule="every-sec"] button.pause`),
		chromedp.WaitVisible(`tr[data-schedule="every-sec"][data-paused="true"]`))
	if next := get(s, "read the paused next tick", chromedp.Text(`tr[data-schedule="every-sec"] td.next`)); next != "- (paused)" {
		t.Fatalf("a paused schedule's next tick reads %q", next)
	}
	h.WaitLog("scheduled tick skipped: the schedule is paused (`host schedules resume` resumes it)", 0)
	s.screenshot("schedules-paused")
	s.do("remove it", chromedp.Click(`tr[data-schedule="every-sec"] button.remove`), chromedp.WaitVisible(`p.done`), chromedp.WaitNotPresent(`tr[data-schedule="every-sec"]`))
	said := get(s, "remove it again", chromedp.Evaluate[string](`(async () => { const r = await fetch("/schedules/named/every-sec/remove", {method: "POST"}); return r.status + ""; })()`, awaitPromise))
	if said != "404" {
		t.Fatalf("removing a removed schedule: %s", said)
	}
	c, err := client.New(ctx, h.NC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.NamedSchedule(ctx, "every-sec"); err == nil || !strings.Contains(err.Error(), schedule.ErrNoNamed.Error()) {
		t.Fatalf("after removal the store says %v", err)
	}
	acts := webAudit(t, c)
	for _, want := range []string{"schedule.add every-sec", "schedule.pause every-sec", "schedule.rm every-sec"} {
		if !slices.Contains(acts, want) {
			t.Errorf("the web face's audit %q lacks %q", acts, want)
		}
	}
}

// A viewer sees neither form, and a POST made from the page anyway is refused 403.
func TestViewerCannotMakeSources(t *testing.T) {
	ps := newPeopleSite(t, map[string]string{"tick.sh": "echo\n"}, fakeRunner{}, nil)
	ps.loginWith(ps.add("vic", people.Viewer))
	for _, p := range []struct{ page, form, post string }{
		{"/webhooks", "form.hook-form", "/webhooks"},
		{"/schedules", "form.schedule-form", "/schedules"},
	} {
		ps.do("open "+p.page, chromedp.Navigate(ps.url+p.page), chromedp.WaitVisible(`main h1`))
		if present(ps.site, p.form) {
			t.Fatalf("a viewer is shown %s", p.form)
		}
		said := get(ps.site, "post "+p.post, chromedp.Evaluate[string](`(async () => {
			const r = await fetch("`+p.post+`", {method: "POST", headers: {Accept: "application/json"}, body: new URLSearchParams({name: "x", auth: "open", function: "tick", schedule: "@every 1s"})});
			return r.status + " " + (await r.json()).error; })()`, awaitPromise))
		if !strings.HasPrefix(said, "403 ") || !strings.Contains(said, "vic is viewer") {
			t.Fatalf("a viewer's POST %s: %q", p.post, said)
		}
	}
}
