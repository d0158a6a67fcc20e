package dashboard_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// greet's main takes an int, an object, an optional string and a string that may be a
// secret; its fake run logs a line and answers with the arguments it got.
const greetPy = `# secrets: api_key
# retries: 3
# next: agent.run.report
def main(count: int, config: dict, label: str = "hi", token: str = ""):
    return {"count": count}
`

var echoArgs = fakeRunner{
	"greet": func(_ context.Context, j *jobtype.Job) *jobtype.Outcome {
		j.Log("stdout", []byte("greeting with "+string(j.Payload)))
		return &jobtype.Outcome{Result: j.Payload}
	},
}

func decodeJSON(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s is not a JSON object: %v", b, err)
	}
	return m
}

// The run form of a function with an int, an object, an optional string and a secret
// reference runs it and shows its result and live log on the same page (Run and wait); the
// job's record keeps the arguments as sent, and its Re-run queues a new job with the same.
func TestRunFormRunsAndWaits(t *testing.T) {
	s := newSite(t, map[string]string{"greet.py": greetPy, "report.sh": "echo\n"}, echoArgs)
	s.do("open the function", chromedp.Navigate(s.url+"/functions/greet"), chromedp.WaitVisible(`#run-form`))
	s.do("fill the form",
		chromedp.SendKeys(`#arg-count`, "3"),
		chromedp.SendKeys(`#arg-config`, `{"depth": 2, "tags": ["a"]}`),
		chromedp.SendKeys(`#arg-label`, "hello"),
		chromedp.SetValue(`select[name="secret.token"]`, "api_key"),
	)
	s.do("run and wait", chromedp.Click(`#run-wait`), chromedp.WaitVisible(`#run-out[data-status="succeeded"]`))
	want := map[string]any{"count": 3.0, "config": map[string]any{"depth": 2.0, "tags": []any{"a"}}, "label": "hello", "token": "$secret:api_key"}
	result := get(s, "read the result", chromedp.Text(`#run-result`))
	if got := decodeJSON(t, []byte(result)); !reflect.DeepEqual(got, want) {
		t.Fatalf("the page shows the result %s, want the arguments %v", result, want)
	}
	if log := get(s, "read the log", chromedp.Text(`#run-log`)); !strings.Contains(log, `greeting with {"count":3`) {
		t.Fatalf("the live log %q lacks the job's line", log)
	}
	if where := get(s, "where", chromedp.Location()); where != s.url+"/functions/greet" {
		t.Fatalf("Run and wait left the page for %s", where)
	}
	s.screenshot("function-run-wait")
	fullScreenshot(s, "function-run-wait-full")

	id := get(s, "read the job id", chromedp.Text(`#run-job`))
	rec := s.h.Record(id)
	if got := decodeJSON(t, rec.Args); !reflect.DeepEqual(got, want) {
		t.Fatalf("the record keeps the arguments %s, want %v", rec.Args, want)
	}
	if !strings.Contains(string(rec.Args), `"$secret:api_key"`) {
		t.Fatalf("the record's arguments %s do not keep the secret's reference as sent", rec.Args)
	}
	if !hasLog(s.h, "dashboard: job run from the form") {
		t.Fatal("the host's log does not record the run and who asked")
	}

	// Re-run, from the finished job's page: a new job, the same arguments.
	s.do("open the finished job", chromedp.Navigate(s.url+"/jobs/"+id), chromedp.WaitVisible(`#rerun`))
	s.do("re-run it", chromedp.Click(`#rerun`))
	var again string
	s.h.Eventually("a second job of greet", func() bool {
		recs, err := s.h.Store.Recent(context.Background(), jobs.Filter{Function: "greet"}, 0)
		for _, r := range recs {
			if r.ID != id {
				again = r.ID
			}
		}
		return err == nil && again != ""
	})
	s.do("see the new job's page", chromedp.WaitVisible(`h1[data-job="`+again+`"]`), chromedp.WaitVisible(`#log-end[data-status="succeeded"]`))
	rerun := s.h.Record(again)
	if rerun.Function != "greet" || rerun.ArgsSHA256 != rec.ArgsSHA256 || !reflect.DeepEqual(decodeJSON(t, rerun.Args), want) {
		t.Fatalf("the re-run's record %+v, want greet with the same arguments as %s", rerun, id)
	}
	if args := get(s, "read the arguments", chromedp.Text(`#job-args`)); !strings.Contains(args, `"token": "$secret:api_key"`) {
		t.Fatalf("the re-run's page shows the arguments %q", args)
	}
	if !hasLog(s.h, "dashboard: job run again") {
		t.Fatal("the host's log does not record the re-run and who asked")
	}
}

// A record that kept no arguments says why, and offers no Re-run; a POST asking for one
// anyway is a 409 saying why.
func TestRerunWithoutArguments(t *testing.T) {
	s := newSite(t, map[string]string{"greet.py": greetPy, "report.sh": "echo\n"}, echoArgs)
	old := &jobs.Record{ID: "old-job", Function: "greet", FlowID: "old-job", Status: jobtype.Succeeded, Attempts: 1,
		Enqueued: time.Now(), Started: time.Now(), Finished: time.Now(), ArgsSHA256: jobs.ArgsHash([]byte(`{"count":1}`))}
	hosttest.PutRecord(t, s.h.Store, old)
	s.do("open the old job", chromedp.Navigate(s.url+"/jobs/old-job"), chromedp.WaitVisible(`#args-not-kept`))
	if n := get(s, "look for a re-run", chromedp.Evaluate[int](`document.querySelectorAll("#rerun").length`)); n != 0 {
		t.Fatal("a job without its arguments offers a Re-run")
	}
	if text := get(s, "read why", chromedp.Text(`#args-not-kept`)); !strings.Contains(text, "written before records kept arguments") {
		t.Fatalf("the page says %q", text)
	}
	code, body := postForm(t, s.url+"/jobs/old-job/rerun", url.Values{})
	if code != http.StatusConflict || !strings.Contains(body, "job old-job cannot be run again") {
		t.Fatalf("re-run of a job without arguments: %d %s", code, body)
	}
}

// fullScreenshot saves the whole page, beyond the window, as name.png among the artifacts.
func fullScreenshot(s *site, name string) {
	s.t.Helper()
	buf := get(s, "screenshot "+name, chromedp.FullScreenshot(100))
	path := filepath.Join(s.t.ArtifactDir(), name+".png")
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		s.t.Fatal(err)
	}
	s.t.Logf("screenshot of %s: %s", name, path)
}

func postForm(t *testing.T, to string, form url.Values) (int, string) {
	t.Helper()
	return post(t, to, "application/x-www-form-urlencoded", form.Encode())
}

func post(t *testing.T, to, contentType, body string) (int, string) {
	t.Helper()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Post(to, contentType, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A value of the wrong type is refused in the page, before anything is sent, and by the host
// in the same words: the dashboard's form handler, and POST /run, whose job fails with them
// (the real runner's check). An oversized form body is a 413, a malformed one a 400.
func TestRunFormRefusesWrongTypes(t *testing.T) {
	findChromium(t)
	h := hosttest.New(t, map[string]string{"count.py": "def main(count: int, config: dict = None):\n    return count\n"})
	s := openSite(t, h, h.Web())
	const want = `argument "count": expected int, got string "three"; fix the payload (the types come from main's signature)`

	s.do("open the function", chromedp.Navigate(s.url+"/functions/count"), chromedp.WaitVisible(`#run-form`))
	s.do("type a word for an int", chromedp.SendKeys(`#arg-count`, "three"), chromedp.Click(`#run-button`))
	// Said once, at the field; not a second time under the form.
	if msg := get(s, "read the page's refusal", chromedp.Text(`.field[data-param="count"] .field-error`)); msg+"; fix the payload (the types come from main's signature)" != want {
		t.Fatalf("the page says %q, want %q", msg, want)
	}
	if again := get(s, "read the form's own message", chromedp.Evaluate[string](`document.getElementById("run-check").textContent`)); again != "" {
		t.Fatalf("the refusal is shown twice: under the form too, %q", again)
	}
	if where := get(s, "where", chromedp.Location()); where != s.url+"/functions/count" {
		t.Fatalf("a refused form was sent: the browser is at %s", where)
	}
	s.screenshot("function-refused")

	code, body := postForm(t, s.url+"/functions/count/run", url.Values{"arg.count": {"three"}})
	if code != http.StatusBadRequest || strings.TrimSpace(body) != want {
		t.Fatalf("the form posted directly: %d %q, want 400 %q", code, body, want)
	}
	code, body, _ = hosttest.Post(t, s.url+"/run/count?wait=30s", `{"count":"three"}`, nil)
	if code != http.StatusUnprocessableEntity || hosttest.Decode[jobs.ErrorEvent](t, []byte(body)).Error != want {
		t.Fatalf("POST /run: %d %s, want 422 with %q", code, body, want)
	}

	tests := []struct {
		name, contentType, body string
		code                    int
		says                    string
	}{
		{"oversized", "application/x-www-form-urlencoded", "arg.count=" + strings.Repeat("1", 2<<20), http.StatusRequestEntityTooLarge, "over the 1048576-byte limit"},
		{"not a form", "application/x-www-form-urlencoded", "arg.count=%zz", http.StatusBadRequest, "the form's body cannot be read"},
		{"object not JSON", "application/x-www-form-urlencoded", "arg.count=1&arg.config=" + url.QueryEscape(`{"a":`), http.StatusBadRequest, `argument "config": not JSON`},
		{"other arguments not an object", "application/x-www-form-urlencoded", "args=" + url.QueryEscape(`[1]`), http.StatusBadRequest, "other arguments: payload must be a JSON object"},
		{"a secret it does not declare", "application/x-www-form-urlencoded", "secret.count=api_key", http.StatusBadRequest, `secret "api_key" is not one function "count" declares`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := post(t, s.url+"/functions/count/run", tt.contentType, tt.body)
			if code != tt.code || !strings.Contains(body, tt.says) {
				t.Fatalf("%d %q, want %d saying %q", code, body, tt.code, tt.says)
			}
		})
	}
	// What the page's own check lets through runs.
	code, body = postForm(t, s.url+"/functions/count/run", url.Values{"arg.count": {"3"}})
	if code != http.StatusSeeOther {
		t.Fatalf("a good form: %d %s, want a redirect to its job", code, body)
	}
}

// A function's page shows its highlighted source, its annotations in words, its wires in and
// out (linking the functions at their other ends), its recent runs and their trend.
func TestFunctionPage(t *testing.T) {
	s := newSite(t, map[string]string{
		"greet.py":  greetPy,
		"report.sh": "echo\n",
		"start.sh":  "# next: agent.run.greet\necho\n",
		"jailed.sh": "# sandbox\n# volume: notes data\n# network: none\necho\n",
	}, echoArgs)
	for _, id := range []string{"fp-1", "fp-2", "fp-3"} {
		s.publish("greet", id, `{"count":1,"config":{}}`)
		s.h.Record(id)
	}
	s.do("open the functions", chromedp.Navigate(s.url+"/functions"), chromedp.WaitVisible(`tr[data-function="greet"]`))
	s.do("follow the name", chromedp.Click(`tr[data-function="greet"] a[href="/functions/greet"]`), chromedp.WaitVisible(`#fn-source`))

	count := func(sel string) int {
		return get(s, "count "+sel, chromedp.Evaluate[int](`document.querySelectorAll(`+"`"+sel+"`"+`).length`))
	}
	// Highlighted: chroma's classes, coloured by its served sheet (not inline styles).
	if n := count(`#fn-source pre.chroma span.kd, #fn-source pre.chroma span.k`); n == 0 {
		t.Fatal("the source has no highlighted keyword")
	}
	colour := get(s, "read a keyword's colour", chromedp.Evaluate[string](`getComputedStyle(document.querySelector("#fn-source .chroma .k, #fn-source .chroma .kd")).color`))
	if colour == get(s, "read the text's colour", chromedp.Evaluate[string](`getComputedStyle(document.querySelector("#fn-source pre.chroma")).color`)) {
		t.Fatalf("keywords are coloured as the text (%s): the chroma sheet did not apply", colour)
	}
	if src := get(s, "read the source", chromedp.Text(`#fn-source`)); !strings.Contains(src, "def main(count: int") {
		t.Fatalf("source %q", src)
	}
	words := get(s, "read the annotations", chromedp.Text(`#fn-annotations`))
	for _, w := range []string{"retries 3 times", "runs on the host, not in a jail", "may be passed the secrets api_key"} {
		if !strings.Contains(words, w) {
			t.Errorf("annotations %q lack %q", words, w)
		}
	}
	if n := count(`#fn-wires tr.wire-in a[href="/functions/start"]`); n != 1 {
		t.Errorf("%d wires in from start, linked; want 1", n)
	}
	if n := count(`#fn-wires tr.wire-out a[href="/functions/report"]`); n != 1 {
		t.Errorf("%d wires out to report, linked; want 1", n)
	}
	if subj := get(s, "read the subjects", chromedp.Text(`#fn-subjects`)); !strings.Contains(subj, "agent.run.greet") {
		t.Errorf("subjects %q", subj)
	}
	if n := count(`#fn-recent tr[data-job] a[href^="/jobs/fp-"]`); n != 3 {
		t.Errorf("%d recent runs linked, want 3", n)
	}
	if n := count(`svg#fn-chart rect.bar:not(.empty)`); n != 1 {
		t.Errorf("%d bars with runs in the chart, want 1 (one hour)", n)
	}
	if title := get(s, "read the bar's title", chromedp.Evaluate[string](`document.querySelector("svg#fn-chart rect.bar:not(.empty) title").textContent`)); !strings.Contains(title, "3 of 3 succeeded") {
		t.Errorf("the bar says %q", title)
	}
	if rate := get(s, "read the rate", chromedp.Text(`#fn-rate`)); rate != "100%" {
		t.Errorf("success rate %q", rate)
	}
	s.screenshot("function")
	fullScreenshot(s, "function-full")

	s.do("open the jailed one", chromedp.Navigate(s.url+"/functions/jailed"), chromedp.WaitVisible(`#fn-annotations`))
	words = get(s, "read the annotations", chromedp.Text(`#fn-annotations`))
	for _, w := range []string{"runs in a jail", "has no network", "volume notes at /data"} {
		if !strings.Contains(words, w) {
			t.Errorf("annotations %q lack %q", words, w)
		}
	}
	if n := count(`#fn-chart-none`); n != 1 {
		t.Error("a function that never ran draws a chart")
	}
}
