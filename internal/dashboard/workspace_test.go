package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/agenthost/host/internal/dashboard"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/testkit/natstest"
	"github.com/agenthost/host/internal/testkit/testwait"
)

// logScrolledToEnd is true when the log viewer shows its last line.
const logScrolledToEnd = `(() => { const b = document.getElementById("job-log"); return b.scrollTop + b.clientHeight >= b.scrollHeight - 2; })()`

// waitFor polls expr in the page until it is true.
func (s *site) waitFor(what, expr string) {
	s.t.Helper()
	s.do(what, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(actionBound)))
}

// A running job's log follows its tail until the reader scrolls up; a search highlights every
// match and Enter, Next and Previous move between them; Start and End jump; the download is
// the whole log as text.
func TestLogViewerFollowsAndSearches(t *testing.T) {
	more, finish := make(chan struct{}), make(chan struct{})
	logLines := func(j *jobtype.Job, from, to int) {
		for i := from; i <= to; i++ {
			text := fmt.Sprintf("line %d", i)
			if i%50 == 0 {
				text += " has a Needle in it"
			}
			j.Log("stdout", []byte(text))
		}
	}
	s := newSite(t, map[string]string{"chatty.sh": "echo\n"}, fakeRunner{
		"chatty": func(ctx context.Context, j *jobtype.Job) *jobtype.Outcome {
			logLines(j, 1, 200)
			for _, wait := range []chan struct{}{more, finish} {
				select {
				case <-wait:
				case <-ctx.Done():
					return &jobtype.Outcome{Err: context.Cause(ctx)}
				}
				if wait == more {
					logLines(j, 201, 400)
				}
			}
			return &jobtype.Outcome{Result: []byte(`{"ok":true}`)}
		},
	})
	s.publish("chatty", "chatty-job", `{}`)
	s.h.Eventually("the job runs", func() bool {
		rec, err := s.h.Store.Get(context.Background(), "chatty-job")
		return err == nil && rec.Status == jobtype.Running
	})
	s.do("open the running job", chromedp.Navigate(s.url+"/jobs/chatty-job"), chromedp.WaitVisible(`#job-log span.line[data-n="200"]`))
	s.waitFor("see it follow the tail", logScrolledToEnd)
	if !get(s, "read the follow toggle", chromedp.Evaluate[bool](`document.getElementById("log-follow").checked`)) {
		t.Fatal("a running job's log does not follow its tail")
	}

	// Search: case does not matter; every match in view is marked; Enter goes to the first.
	s.do("search", chromedp.SendKeys(`#log-search`, "needle"), chromedp.KeyEvent(kb.Enter))
	s.waitFor("see the first match", `document.getElementById("log-matches").textContent === "1 of 4"`)
	current := `(() => { const m = document.querySelector("#job-log mark.current"); return m ? m.parentElement.dataset.n + ":" + m.textContent : ""; })()`
	if got := get(s, "read the current match", chromedp.Evaluate[string](current)); got != "50:Needle" {
		t.Fatalf("current match %q, want line 50's Needle", got)
	}
	everyMarked := `(() => { const ls = Array.from(document.querySelectorAll("#job-log .line")).filter(l => l.textContent.includes("Needle"));
		return ls.length > 0 && ls.every(l => l.querySelector("mark")) ? ls.length : 0; })()`
	if n := get(s, "check the marks", chromedp.Evaluate[int](everyMarked)); n == 0 {
		t.Fatal("the matches drawn are not all marked")
	}
	if get(s, "read the follow toggle", chromedp.Evaluate[bool](`document.getElementById("log-follow").checked`)) {
		t.Fatal("moving to a match left the log following its tail")
	}
	s.do("next match", chromedp.Click(`#log-next`))
	s.waitFor("see the second match", `document.getElementById("log-matches").textContent === "2 of 4"`)
	if got := get(s, "read the current match", chromedp.Evaluate[string](current)); got != "100:Needle" {
		t.Fatalf("after Next the current match is %q, want line 100's", got)
	}
	s.do("previous match", chromedp.Click(`#log-prev`))
	s.waitFor("see the first match again", `document.getElementById("log-matches").textContent === "1 of 4"`)
	if got := get(s, "read the current match", chromedp.Evaluate[string](current)); got != "50:Needle" {
		t.Fatalf("after Previous the current match is %q, want line 50's", got)
	}

	// Lines that come while the reader is up the log are counted and searched, but the view
	// stays where the reader is.
	top := get(s, "read the scroll position", chromedp.Evaluate[float64](`document.getElementById("job-log").scrollTop`))
	close(more)
	s.waitFor("see the new matches counted", `document.getElementById("log-matches").textContent === "1 of 8"`)
	s.waitFor("see the new lines counted", `document.getElementById("log-count").textContent === "400 lines"`)
	if now := get(s, "read the scroll position", chromedp.Evaluate[float64](`document.getElementById("job-log").scrollTop`)); now != top {
		t.Fatalf("the log scrolled from %v to %v while the reader was up it", top, now)
	}
	s.screenshot("log-search")

	s.do("jump to the end", chromedp.Click(`#log-bottom`), chromedp.WaitVisible(`#job-log span.line[data-n="400"]`))
	s.waitFor("see it follow again", `document.getElementById("log-follow").checked && `+logScrolledToEnd)
	s.do("jump to the start", chromedp.Click(`#log-top`), chromedp.WaitVisible(`#job-log span.line[data-n="1"]`))
	if get(s, "read the follow toggle", chromedp.Evaluate[bool](`document.getElementById("log-follow").checked`)) {
		t.Fatal("the log follows its tail after jumping to its start")
	}

	// The download is the whole log, as a file.
	href := get(s, "read the download link", chromedp.Evaluate[string](`document.getElementById("log-download").href`))
	resp, err := http.Get(href)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" ||
		resp.Header.Get("Content-Disposition") != `attachment; filename=chatty-job.log` {
		t.Fatalf("download %s: %d %v", href, resp.StatusCode, resp.Header)
	}
	if lines := strings.Split(strings.TrimSuffix(string(body), "\n"), "\n"); len(lines) != 400 || lines[0] != "line 1" || lines[399] != "line 400 has a Needle in it" {
		t.Fatalf("downloaded %d lines, first %q, last %q", len(lines), lines[0], lines[len(lines)-1])
	}
	close(finish)
	s.h.Record("chatty-job")
}

// A 50,000-line log opens at its last line with a few dozen line elements, not 50,000, and a
// search finds a line in its middle. The time from navigation to the last line on screen is
// logged, not asserted.
func TestLogViewerLongLog(t *testing.T) {
	const n = 50_000
	s := newSite(t, map[string]string{"long.sh": "echo\n"}, fakeRunner{
		"long": func(_ context.Context, j *jobtype.Job) *jobtype.Outcome {
			for i := 1; i <= n; i++ {
				stream := "stdout"
				if i%1000 == 0 {
					stream = "stderr"
				}
				j.Log(stream, fmt.Appendf(nil, "%05d the long log goes on with line number %d", i, i))
			}
			return &jobtype.Outcome{Result: []byte(`{"lines":50000}`)}
		},
	})
	s.publish("long", "long-job", `{}`)
	if rec := s.h.Record("long-job"); rec.Status != jobtype.Succeeded {
		t.Fatalf("record %+v", rec)
	}
	// Any style or script the host's CSP blocks would be reported here.
	s.do("watch for CSP violations", chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		_, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
			Source: `window.cspViolations = []; document.addEventListener("securitypolicyviolation", (e) => window.cspViolations.push(e.violatedDirective + " " + e.blockedURI))`})
		return err
	}))
	for range 2 { // the second load is the one measured: the first warms the browser and the host
		s.do("open the long log", chromedp.Navigate(s.url+"/jobs/long-job"), chromedp.WaitVisible(`#log-end[data-shown-ms]`))
	}
	s.do("see its last line", chromedp.WaitVisible(`#job-log span.line[data-n="50000"]`))
	shown := get(s, "read when the last line was shown", chromedp.Evaluate[float64](`Number(document.getElementById("log-end").dataset.shownMs)`))
	t.Logf("a %d-line log: %.0f ms from navigation to its last line on screen", n, shown)
	for _, u := range []string{"/jobs/long-job/log", "/jobs/long-job/log.txt"} {
		ms := get(s, "time a fetch", chromedp.Evaluate[float64](`(async () => { const t0 = performance.now(); const r = await fetch("`+u+`"); await r.text(); return performance.now() - t0; })()`, func(p *runtime.EvaluateParams) { yes := true; p.AwaitPromise = &yes }))
		t.Logf("for comparison, fetching %s alone: %.0f ms", u, ms)
	}
	if nodes := get(s, "count line elements", chromedp.Evaluate[int](`document.querySelectorAll("#job-log .line").length`)); nodes == 0 || nodes > 500 {
		t.Fatalf("%d line elements for a %d-line log, want a window of them", nodes, n)
	}
	if got := get(s, "read the line count", chromedp.Text(`#log-count`)); got != "50000 lines" {
		t.Fatalf("line count %q", got)
	}
	s.do("search the middle", chromedp.SendKeys(`#log-search`, "line number 25000"), chromedp.KeyEvent(kb.Enter),
		chromedp.WaitVisible(`#job-log span.line[data-n="25000"] mark.current`))
	if got := get(s, "read the matches", chromedp.Text(`#log-matches`)); got != "1 of 1" {
		t.Fatalf("matches %q", got)
	}
	s.screenshot("log-long-search")
	if v := get(s, "read CSP violations", chromedp.Evaluate[[]string](`window.cspViolations`)); len(v) != 0 {
		t.Fatalf("the log viewer breaks the CSP: %q", v)
	}
	if nodes := get(s, "count line elements", chromedp.Evaluate[int](`document.querySelectorAll("#job-log .line").length`)); nodes > 500 {
		t.Fatalf("%d line elements after a search", nodes)
	}
}

// The jobs list finds jobs by part of a function's name or id, by status and time range, and
// folds consecutive scheduled runs of one function; the URL keeps the filters, and so do the
// live rows. Runs marked scheduled are the schedule's own, not a call of the same function.
func TestJobsListFilters(t *testing.T) {
	s := newSite(t, map[string]string{"tick-every-15s.sh": "# schedule: @every 1s\necho\n", "deploy.sh": "echo\n"}, fakeRunner{})
	s.publish("deploy", "deploy-1", `{}`)
	s.h.Record("deploy-1")
	scheduled := func() (n int, manual *jobs.Summary) {
		sums, err := s.h.Store.Summaries(context.Background(), jobs.Filter{Function: "tick-every-15s"})
		if err != nil {
			t.Fatal(err)
		}
		for _, sum := range sums {
			if sum.Scheduled {
				n++
			} else if sum.ID == "manual-tick" {
				manual = &sum
			}
		}
		return n, manual
	}
	s.h.Eventually("three scheduled runs", func() bool { n, _ := scheduled(); return n >= 3 })
	s.publish("tick-every-15s", "manual-tick", `{}`)
	s.h.Record("manual-tick")
	if _, manual := scheduled(); manual == nil {
		t.Fatal("a call of a scheduled function is taken for a run of its schedule")
	}
	s.h.Eventually("three more scheduled runs", func() bool { n, _ := scheduled(); return n >= 6 })

	from := time.Now().Add(-time.Hour).Format("2006-01-02T15:04")
	to := time.Now().Add(time.Hour).Format("2006-01-02T15:04")
	s.do("open the jobs list", chromedp.Navigate(s.url+"/jobs"), chromedp.WaitVisible(`tr[data-job="deploy-1"]`))
	s.do("filter by part of a name and a time range", chromedp.SendKeys(`#job-filter input[name=function]`, "TICK"),
		chromedp.SetValue(`#job-filter input[name=from]`, from), chromedp.SetValue(`#job-filter input[name=to]`, to),
		chromedp.Focus(`#job-filter input[name=function]`), chromedp.KeyEvent(kb.Enter))
	// The unfiltered page lists manual-tick too: wait for the filtered page itself, not a row.
	testwait.For(t, "the filtered list's address", actionBound, func() error {
		ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
		defer cancel()
		loc, err := chromedp.Run(ctx, chromedp.Location()) // fails while the page navigates
		if err != nil || !strings.Contains(loc, "function=TICK") {
			return fmt.Errorf("at %q (%v)", loc, err)
		}
		return nil
	})
	s.do("see the filtered rows", chromedp.WaitVisible(`tr[data-job="manual-tick"]`))
	loc := get(s, "read the URL", chromedp.Location())
	u, err := url.Parse(loc)
	if err != nil {
		t.Fatal(err)
	}
	if q := u.Query(); q.Get("function") != "TICK" || q.Get("from") != from || q.Get("to") != to {
		t.Fatalf("the URL %s does not keep the filters", loc)
	}
	if live := get(s, "read the live rows' URL", chromedp.Evaluate[string](`document.getElementById("job-list").dataset.live`)); !strings.Contains(live, "function=TICK") || !strings.Contains(live, "from=") || !strings.Contains(live, "to=") {
		t.Fatalf("the live rows come from %q, without the filters", live)
	}
	rows := `Array.from(document.querySelectorAll("#job-rows tr[data-job]")).map(r => r.dataset.job)`
	checkRows := func(when string) {
		t.Helper()
		ids := get(s, "list the rows", chromedp.Evaluate[[]string](rows))
		if len(ids) < 2 || len(ids) > 4 {
			// the manual call splits the schedule's runs in two folds: at most a head row each
			// side, and one more if a tick came between two refreshes
			t.Fatalf("%s: rows %q, want the manual call and a folded row or two of scheduled runs", when, ids)
		}
		for _, id := range ids {
			if id == "deploy-1" {
				t.Fatalf("%s: deploy-1 is listed for function TICK", when)
			}
		}
		if n := get(s, "count the folds", chromedp.Evaluate[int](`document.querySelectorAll("tr.folded").length`)); n == 0 {
			t.Fatalf("%s: no folded row for %d scheduled runs", when, len(ids))
		}
	}
	checkRows("the filtered page")
	if tag := get(s, "count tags", chromedp.Evaluate[int](`document.querySelectorAll('tr[data-job="manual-tick"] .tag').length`)); tag != 0 {
		t.Fatal("the manual call is tagged scheduled")
	}
	s.screenshot("jobs-filtered")
	s.do("let the rows refresh", chromedp.Evaluate[chromedp.Void](`window.before = document.querySelector("#job-rows")`))
	s.waitFor("see the rows refreshed", `document.querySelector("#job-rows") !== window.before`)
	checkRows("the live rows")

	// Every scheduled run shown, and the folded row's link shows them.
	more := get(s, "read the fold's link", chromedp.Evaluate[string](`document.querySelector("tr.folded a").href`))
	if !strings.Contains(more, "scheduled=show") || !strings.Contains(more, "function=tick-every-15s") {
		t.Fatalf("the folded row links to %s", more)
	}
	s.do("open every run", chromedp.Navigate(more), chromedp.WaitVisible(`tr[data-job="manual-tick"]`))
	if ids := get(s, "list the rows", chromedp.Evaluate[[]string](rows)); len(ids) < 7 {
		t.Fatalf("scheduled=show lists %q, want every run", ids)
	}
	s.do("hide the schedule's runs", chromedp.Navigate(s.url+"/jobs?function=tick&scheduled=hide"), chromedp.WaitVisible(`tr[data-job="manual-tick"]`))
	if ids := get(s, "list the rows", chromedp.Evaluate[[]string](rows)); len(ids) != 1 {
		t.Fatalf("scheduled=hide lists %q, want only the manual call", ids)
	}
	s.do("a range with nothing in it", chromedp.Navigate(s.url+"/jobs?from=2001-01-01T00:00&to=2001-01-02T00:00"), chromedp.WaitVisible(`table.jobs`))
	if ids := get(s, "list the rows", chromedp.Evaluate[[]string](rows)); len(ids) != 0 {
		t.Fatalf("a day in 2001 lists %q", ids)
	}
	// Relative times, with the exact time on hover.
	s.do("open the list", chromedp.Navigate(s.url+"/jobs?id=deploy"), chromedp.WaitVisible(`tr[data-job="deploy-1"]`))
	title := get(s, "read the time's title", chromedp.Evaluate[string](`document.querySelector('tr[data-job="deploy-1"] time').title`))
	text := get(s, "read the time", chromedp.Evaluate[string](`document.querySelector('tr[data-job="deploy-1"] time').textContent`))
	if !strings.HasSuffix(text, " ago") && text != "just now" || !strings.HasPrefix(title, time.Now().Format("2006-01-02")) {
		t.Fatalf("time %q titled %q, want a relative time with the exact one on hover", text, title)
	}
}

// A step waiting for approval is in the inbox with its result and flow; approved from there
// with the keyboard (Tab to the button, Enter), with a comment, its flow goes on and the
// comment is in its record.
func TestInboxApprovesByKeyboard(t *testing.T) {
	s := newSite(t, map[string]string{"plan.sh": "# approve\n# next: agent.run.apply\necho\n", "apply.sh": "echo\n", "other.sh": "# approve\necho\n"}, fakeRunner{
		"plan": func(context.Context, *jobtype.Job) *jobtype.Outcome {
			return &jobtype.Outcome{Result: []byte(`{"change":"drop the old index"}`)}
		},
	})
	s.do("open the empty inbox", chromedp.Navigate(s.url+"/"), chromedp.Click(`nav a[href="/inbox"]`), chromedp.WaitVisible(`#inbox-empty`))
	s.publish("plan", "plan-i", `{}`)
	s.publish("other", "other-i", `{}`)
	for _, id := range []string{"plan-i", "other-i"} {
		s.h.Eventually(id+" waits for a decision", func() bool {
			rec, err := s.h.Store.Get(context.Background(), id)
			return err == nil && rec.Status == jobtype.Waiting
		})
	}
	s.do("open the inbox", chromedp.Navigate(s.url+"/inbox"), chromedp.WaitVisible(`section[data-job="plan-i"]`), chromedp.WaitVisible(`section[data-job="other-i"]`))
	if res := get(s, "read the result", chromedp.Text(`section[data-job="plan-i"] pre.result`)); !strings.Contains(res, `"change": "drop the old index"`) {
		t.Fatalf("the inbox shows the result %q", res)
	}
	if href := get(s, "read the flow link", chromedp.Evaluate[string](`document.querySelector('section[data-job="plan-i"] a[href^="/flows/"]').getAttribute("href")`)); href != "/flows/plan-i" {
		t.Fatalf("flow link %q", href)
	}
	s.screenshot("inbox")
	s.do("comment, Tab to Approve and press Enter", chromedp.SendKeys(`section[data-job="plan-i"] input[name=comment]`, "ship it"),
		chromedp.KeyEvent(kb.Tab))
	if focused := get(s, "read the focus", chromedp.Evaluate[string](`document.activeElement.className + ":" + document.activeElement.closest("section").dataset.job`)); focused != "approve:plan-i" {
		t.Fatalf("Tab from the comment focused %q, want plan-i's Approve", focused)
	}
	s.do("press Enter", chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(`#decided`))
	if said := get(s, "read what was decided", chromedp.Text(`#decided`)); !strings.Contains(said, "approved") || !strings.Contains(said, "ship it") || !strings.Contains(said, "plan-i") {
		t.Fatalf("the inbox says %q", said)
	}
	if n := get(s, "count the waiting", chromedp.Evaluate[int](`document.querySelectorAll("section.approval").length`)); n != 1 {
		t.Fatalf("%d steps still listed, want only other-i", n)
	}
	rec := s.h.Record("plan-i")
	if rec.Status != jobtype.Succeeded || rec.Approval.Decision != jobs.Approved || rec.Approval.Comment != "ship it" || !strings.HasPrefix(rec.Approval.By, "the dashboard (") {
		t.Fatalf("record %+v, approval %+v", rec, rec.Approval)
	}
	s.h.Eventually("apply runs after plan-i", func() bool {
		recs, err := s.h.Store.Recent(context.Background(), jobs.Filter{Function: "apply"}, 0)
		return err == nil && len(recs) == 1 && recs[0].ParentJob == "plan-i" && recs[0].Status.Final()
	})
	s.do("reject the other", chromedp.Click(`section[data-job="other-i"] button.reject`), chromedp.WaitVisible(`#inbox-empty`))
	if rec := s.h.Record("other-i"); rec.Approval.Decision != jobs.Rejected {
		t.Fatalf("other-i after reject: %+v", rec.Approval)
	}
}

// An error page keeps the layout and its nav for a browser, and stays plain text for others;
// a path that takes another method is a 405 naming the ones it takes.
func TestErrorPages(t *testing.T) {
	s := newSite(t, map[string]string{"hello.sh": "echo\n"}, fakeRunner{})
	handler := s.h.Web()
	tests := []struct {
		method, path, accept string
		code                 int
		allow                string
		has                  []string
	}{
		{"GET", "/jobs/no-such-job", "text/html", 404, "", []string{`<nav>`, `<h1>404 Not Found</h1>`, "no-such-job"}},
		{"GET", "/jobs/no-such-job", "", 404, "", []string{"no-such-job"}},
		{"GET", "/nowhere", "text/html,application/xhtml+xml", 404, "", []string{`<nav>`, "no page at /nowhere"}},
		{"GET", "/nowhere", "", 404, "", []string{"no page at /nowhere"}},
		{"GET", "/run/hello", "text/html", 405, "POST", []string{`<nav>`, "405 Method Not Allowed", "takes POST"}},
		{"GET", "/run/hello", "", 405, "POST", []string{"GET /run/hello: this address takes POST"}},
		{"PUT", "/run/hello", "", 405, "POST", nil},
		{"POST", "/jobs", "", 405, "GET, HEAD", []string{"takes GET, HEAD"}},
		{"DELETE", "/inbox", "text/html", 405, "GET, HEAD", []string{`<nav>`}},
		{"GET", "/jobs/hello/log.txt", "", 404, "", nil},
		{"GET", "/jobs?status=lost", "text/html", 400, "", []string{`<nav>`, `status &#34;lost&#34; is not a job&#39;s status`}},
		{"GET", "/jobs?from=yesterday", "", 400, "", []string{`from &#34;yesterday&#34; is not a time: write it as 2026-01-02T15:04`}},
		{"GET", "/jobs?from=2026-01-02T00:00&to=2026-01-01T00:00", "", 400, "", []string{"is not before to"}},
		{"GET", "/jobs?scheduled=maybe", "", 400, "", []string{"it is fold, show or hide"}},
		{"GET", "/jobs?page=-1", "", 400, "", []string{"it is a number from 0"}},
		{"GET", "/jobs/rows?status=lost", "", 400, "", []string{"is not a job"}},
		{"POST", "/inbox/no-such-job/decide", "", 400, "", []string{`decision "": it is approve or reject`}},
		{"GET", "/inbox", "text/html", 200, "", []string{"Nothing waits for a decision."}},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path+" "+tt.accept, func(t *testing.T) {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(tt.method, tt.path, nil)
			req.Host, req.RemoteAddr = "127.0.0.1:8080", "127.0.0.1:40000"
			if tt.accept != "" {
				req.Header.Set("Accept", tt.accept)
			}
			handler.ServeHTTP(rec, req)
			body := rec.Body.String()
			if rec.Code != tt.code {
				t.Fatalf("%d, want %d: %s", rec.Code, tt.code, body)
			}
			if got := rec.Header().Get("Allow"); got != tt.allow {
				t.Errorf("Allow %q, want %q", got, tt.allow)
			}
			html := strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html")
			if html != (tt.accept != "" || strings.HasPrefix(tt.path, "/jobs?") || strings.HasPrefix(tt.path, "/jobs/rows")) {
				t.Errorf("Content-Type %q for Accept %q", rec.Header().Get("Content-Type"), tt.accept)
			}
			for _, want := range tt.has {
				if !strings.Contains(body, want) {
					t.Errorf("no %q in %s", want, body)
				}
			}
			if m := inline.FindString(body); html && m != "" {
				t.Errorf("inline script or style %q, which a strict CSP blocks", m)
			}
		})
	}
	s.do("open a missing job", chromedp.Navigate(s.url+"/jobs/no-such-job"), chromedp.WaitVisible(`#error-message`))
	if n := get(s, "count the nav's links", chromedp.Evaluate[int](`document.querySelectorAll("nav a").length`)); n < 8 {
		t.Fatalf("the error page's nav has %d links", n)
	}
	s.screenshot("error-404")
	s.do("follow the nav from it", chromedp.Click(`nav a[href="/functions"]`), chromedp.WaitVisible(`h1`))
	if where := get(s, "read the URL", chromedp.Location()); !strings.HasSuffix(where, "/functions") {
		t.Fatalf("the nav of the error page went to %s", where)
	}
}

// Consecutive runs of one schedule fold into the newest of them, saying how many more and how
// they ended; a job between them splits the fold; show and hide list every run or none.
func TestJobsListFolds(t *testing.T) {
	nc, js := natstest.Start(t)
	st, err := jobs.Open(context.Background(), js, time.Hour, 1)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Now().Add(-time.Hour).Truncate(time.Minute)
	for i := range 60 {
		at := base.Add(time.Duration(i) * 15 * time.Second)
		status := jobtype.Succeeded
		if i == 10 || i == 20 {
			status = jobtype.Failed
		}
		hosttest.PutRecord(t, st, &jobs.Record{ID: fmt.Sprintf("tick-%02d", i), Function: "tick-every-15s", FlowID: fmt.Sprintf("tick-%02d", i),
			Status: status, Attempts: 1, Enqueued: at, Started: at, Finished: at.Add(time.Second), Scheduled: at})
	}
	at := base.Add(30*15*time.Second + time.Second)
	hosttest.PutRecord(t, st, &jobs.Record{ID: "deploy-1", Function: "deploy", FlowID: "deploy-1", Status: jobtype.Succeeded, Attempts: 1,
		Enqueued: at, Started: at, Finished: at.Add(time.Second)})
	d := dashboard.New(dashboard.Config{NC: nc})
	tests := []struct {
		path string
		rows []string // the rows' job ids, newest first
		has  []string
	}{
		{"/jobs", []string{"tick-59", "deploy-1", "tick-30"}, []string{
			"… and 28 more scheduled runs of tick-every-15s</a> (28 succeeded)",
			"… and 30 more scheduled runs of tick-every-15s</a> (28 succeeded, 2 failed)",
			`href="/jobs?function=tick-every-15s&amp;scheduled=show"`, "<span id=\"job-total\">61</span> jobs."}},
		{"/jobs?scheduled=hide", []string{"deploy-1"}, nil},
		{"/jobs?function=TICK&status=failed", []string{"tick-20"}, []string{"… and 1 more scheduled run of tick-every-15s</a> (1 failed)"}},
		{"/jobs?id=tick-5&scheduled=show", []string{"tick-59", "tick-58", "tick-57", "tick-56", "tick-55", "tick-54", "tick-53", "tick-52", "tick-51", "tick-50"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			code, body := getPage(t, d, tt.path)
			if code != http.StatusOK {
				t.Fatalf("%d: %s", code, body)
			}
			var rows []string
			for rest := body; ; {
				i := strings.Index(rest, `" data-job="`)
				if i < 0 {
					break
				}
				rest = rest[i+len(`" data-job="`):]
				rows = append(rows, rest[:strings.IndexByte(rest, '"')])
			}
			if !slices.Equal(rows, tt.rows) {
				t.Errorf("rows %q, want %q", rows, tt.rows)
			}
			for _, want := range tt.has {
				if !strings.Contains(body, want) {
					t.Errorf("no %q in the page", want)
				}
			}
		})
	}
}
