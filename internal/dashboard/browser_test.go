package dashboard_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/dashboard"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/objstore"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// fakeRunner answers each run with what its function's behaviour says; a function without
// one succeeds at once.
type fakeRunner map[string]func(ctx context.Context, j *jobtype.Job) *jobtype.Outcome

func (f fakeRunner) Start(ctx context.Context, fn *functions.Function, _ string, j *jobtype.Job) jobtype.Handle {
	return hosttest.Started(ctx, func(ctx context.Context) *jobtype.Outcome {
		if b := f[fn.Name]; b != nil {
			return b(ctx, j)
		}
		return &jobtype.Outcome{Result: []byte(`{"ok":true}`)}
	}, nil)
}

// site is a host with its HTTP handler served, and a headless Chromium to look at it.
type site struct {
	t   *testing.T
	h   *hosttest.H
	url string
	ctx context.Context

	mu      sync.Mutex
	dialogs []string // every alert, confirm or prompt the pages opened, as "type: message"
}

func newSite(t *testing.T, files map[string]string, run fakeRunner) *site {
	t.Helper()
	h := hosttest.NewEngine(t, files, run)
	return openSite(t, h, h.Web())
}

// openSite serves handler for h and starts the browser.
func openSite(t *testing.T, h *hosttest.H, handler http.Handler) *site {
	t.Helper()
	chrome := findChromium(t)
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1280, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	s := &site{t: t, h: h, url: srv.URL, ctx: ctx}
	err := chromedp.Listen(ctx, func(ev any) {
		if d, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			s.mu.Lock()
			s.dialogs = append(s.dialogs, string(d.Type)+": "+d.Message)
			s.mu.Unlock()
			// Confirm every action; the listener must not wait on the browser itself.
			go chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	})
	if err != nil {
		t.Fatalf("start chromium %s: %v", chrome, err)
	}
	return s
}

// findChromium skips the test, loudly, on a machine without Chromium; scripts/setup installs it.
func findChromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("SKIPPED LOUDLY: no Chromium for the dashboard's browser tests; install it with `apt-get install -y chromium` (scripts/setup does)")
	return ""
}

// actionBound only keeps a broken test from hanging; nothing here is timed.
const actionBound = time.Minute

func (s *site) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, actionBound)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		s.t.Fatalf("%s: %v\n%s", what, err, s.describe())
	}
}

// get runs one action that returns a value.
func get[T any](s *site, what string, a chromedp.Action[T]) T {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, actionBound)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		s.t.Fatalf("%s: %v\n%s", what, err, s.describe())
	}
	return v
}

// describe says where the browser is and what it shows, for a failure's message.
func (s *site) describe() string {
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	where, _ := chromedp.Run(ctx, chromedp.Location())
	text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	return "the browser is at " + where + ", showing:\n" + text
}

func (s *site) dialogsSeen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.dialogs...)
}

// screenshot saves the page as name.png among the test's artifacts and fails the test if the
// picture is one colour all over: a page that drew nothing.
func (s *site) screenshot(name string) {
	s.t.Helper()
	buf := get(s, "screenshot "+name, chromedp.CaptureScreenshot())
	path := filepath.Join(s.t.ArtifactDir(), name+".png")
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		s.t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(buf))
	if err != nil {
		s.t.Fatalf("screenshot %s is not a PNG: %v", path, err)
	}
	b := img.Bounds()
	first := img.At(b.Min.X, b.Min.Y)
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if img.At(x, y) != first {
				s.t.Logf("screenshot of %s: %s", name, path)
				return
			}
		}
	}
	s.t.Fatalf("screenshot %s is blank: every pixel is %v", path, first)
}

// flowEnds waits for the flow to have n jobs, all ended, and returns their records.
func (s *site) flowEnds(flow string, n int) []*jobs.Record {
	s.t.Helper()
	var recs []*jobs.Record
	s.h.Eventually(fmt.Sprintf("the %d jobs of flow %s end", n, flow), func() bool {
		var err error
		recs, err = s.h.Store.Recent(context.Background(), jobs.Filter{Flow: flow}, 0)
		return err == nil && len(recs) == n && !slices.ContainsFunc(recs, func(r *jobs.Record) bool { return !r.Status.Final() })
	})
	return recs
}

func (s *site) publish(function, id, payload string) {
	s.t.Helper()
	s.h.Publish(bus.RunSubject(function), payload, map[string]string{bus.HeaderMsgID: id})
}

// A job published on NATS shows up on the open jobs page by itself: the page is not
// reloaded (a mark left on its window survives).
func TestJobsPageShowsNewJobsLive(t *testing.T) {
	s := newSite(t, map[string]string{"hello.sh": "echo\n"}, fakeRunner{})
	s.do("open the jobs page", chromedp.Navigate(s.url+"/"), chromedp.WaitVisible(`table.jobs`),
		chromedp.Evaluate[chromedp.Void](`window.notReloaded = true`))
	s.publish("hello", "live-job-1", `{"name":"x"}`)
	s.do("see the new job", chromedp.WaitVisible(`tr[data-job="live-job-1"]`))
	if !get(s, "check the page was not reloaded", chromedp.Evaluate[bool](`window.notReloaded === true`)) {
		t.Fatal("the jobs page was reloaded to show the new job; it must update in place")
	}
	s.do("see it succeed", chromedp.WaitVisible(`tr[data-job="live-job-1"].status-succeeded`))
	if status := get(s, "read its status", chromedp.Text(`tr[data-job="live-job-1"] td.status`)); status != "succeeded" {
		t.Fatalf("status cell %q, want succeeded", status)
	}
	s.screenshot("jobs")

	// The filters narrow the list to what they select.
	s.publish("hello", "live-job-2", `{}`)
	s.h.Record("live-job-2")
	rows := `document.querySelectorAll("#job-rows tr").length`
	s.do("filter by status", chromedp.Navigate(s.url+"/jobs?function=hello&status=canceled"), chromedp.WaitVisible(`table.jobs`))
	if n := get(s, "count rows", chromedp.Evaluate[int](rows)); n != 0 {
		t.Fatalf("%d rows for canceled jobs, want none", n)
	}
	s.do("filter by function", chromedp.Navigate(s.url+"/jobs?function=hello"), chromedp.WaitVisible(`tr[data-job="live-job-2"]`))
	if n := get(s, "count rows", chromedp.Evaluate[int](rows)); n != 2 {
		t.Fatalf("%d rows for function hello, want 2", n)
	}
}

// A running job's page streams its log line by line, and its Cancel button (confirmed) stops
// it; a second cancel of the ended job is a 409.
func TestJobPageStreamsLogAndCancels(t *testing.T) {
	more := make(chan struct{})
	s := newSite(t, map[string]string{"slow.sh": "echo\n"}, fakeRunner{
		"slow": func(ctx context.Context, j *jobtype.Job) *jobtype.Outcome {
			j.Log("stdout", []byte("first line"))
			select {
			case <-more:
			case <-ctx.Done():
				return &jobtype.Outcome{Err: context.Cause(ctx)}
			}
			j.Log("stderr", []byte("second line"))
			<-ctx.Done()
			return &jobtype.Outcome{Err: context.Cause(ctx)}
		},
	})
	s.publish("slow", "slow-job", `{"token":"$secret:api"}`)
	s.h.Eventually("the job runs", func() bool {
		rec, err := s.h.Store.Get(context.Background(), "slow-job")
		return err == nil && rec.Status == jobtype.Running
	})
	s.do("open the running job", chromedp.Navigate(s.url+"/jobs/slow-job"), chromedp.WaitVisible(`#job-log span.stdout`))
	if args := get(s, "read the arguments", chromedp.Text(`#job-args`)); !strings.Contains(args, `"token": "$secret:api"`) {
		t.Fatalf("arguments %q, want the secret's reference as it was sent", args)
	}
	if log := get(s, "read the log", chromedp.Text(`#job-log`)); !strings.Contains(log, "first line") || strings.Contains(log, "second line") {
		t.Fatalf("log so far %q, want only the first line", log)
	}
	close(more)
	s.do("see the next line arrive", chromedp.WaitVisible(`#job-log span.stderr`))
	if log := get(s, "read the log", chromedp.Text(`#job-log`)); !strings.Contains(log, "second line") {
		t.Fatalf("log %q, want the second line", log)
	}
	s.screenshot("job-running")

	s.do("cancel it", chromedp.Click(`#cancel`), chromedp.WaitVisible(`#job-status.status-canceled`))
	if status := get(s, "read the status", chromedp.Text(`#job-status`)); status != "canceled" {
		t.Fatalf("status after cancel %q", status)
	}
	if d := s.dialogsSeen(); len(d) != 1 || !strings.HasPrefix(d[0], "confirm: Cancel job slow-job") {
		t.Fatalf("dialogs %q, want one confirm for the cancel", d)
	}
	if rec := s.h.Record("slow-job"); rec.Status != jobtype.Canceled || !strings.Contains(rec.Error, "canceled by the dashboard (") || !strings.Contains(rec.Error, "from 127.0.0.1:") {
		t.Fatalf("record after cancel: %+v", rec)
	}
	if !hasLog(s.h, "dashboard: job canceled") {
		t.Fatal("the host's log does not record the cancel and who asked")
	}
	s.screenshot("job-canceled")

	resp, err := http.Post(s.url+"/jobs/slow-job/cancel", "application/x-www-form-urlencoded", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("cancel of a canceled job: %d, want 409", resp.StatusCode)
	}
}

// hasLog reports whether the host logged msg with who did it.
func hasLog(h *hosttest.H, msg string) bool {
	for _, e := range h.Logs.All() {
		if e.Message != msg {
			continue
		}
		for _, f := range e.Context {
			if f.Key == "by" && f.String != "" {
				return true
			}
		}
	}
	return false
}

// A log line (and an error) holding markup shows as text: no script runs, no element is made.
func TestMarkupInALogShowsAsText(t *testing.T) {
	const evil = `<script>alert(1)</script><img src=x onerror=alert(2)>`
	s := newSite(t, map[string]string{"evil.sh": "echo\n"}, fakeRunner{
		"evil": func(_ context.Context, j *jobtype.Job) *jobtype.Outcome {
			j.Log("stdout", []byte(evil))
			return &jobtype.Outcome{Err: errors.New(evil), ExitCode: 1}
		},
	})
	s.publish("evil", "evil-job", `{}`)
	s.h.Record("evil-job")
	s.do("open the job", chromedp.Navigate(s.url+"/jobs/evil-job"), chromedp.WaitVisible(`#log-end[data-status]`))
	log := get(s, "read the log", chromedp.Text(`#job-log`))
	errText := get(s, "read the error", chromedp.Text(`#job-error`))
	if !strings.Contains(log, evil) || !strings.Contains(errText, evil) {
		t.Fatalf("log %q and error %q, want the markup as text", log, errText)
	}
	if n := get(s, "count elements", chromedp.Evaluate[int](`document.querySelectorAll("main script, main img").length`)); n != 0 {
		t.Fatalf("%d script or img elements made from the job's output", n)
	}
	s.do("open the jobs list", chromedp.Navigate(s.url+"/jobs"), chromedp.WaitVisible(`tr[data-job="evil-job"]`))
	s.screenshot("job-xss")
	if d := s.dialogsSeen(); len(d) != 0 {
		t.Fatalf("the job's output ran script: dialogs %q", d)
	}
}

// thirdBreaks fails the function named third, for good, and runs every other.
var thirdBreaks = fakeRunner{
	"third": func(context.Context, *jobtype.Job) *jobtype.Outcome {
		return &jobtype.Outcome{Err: errors.New("third step broke"), ExitCode: 3}
	},
}

// A three-step flow whose last step fails is drawn as a picture: a bar per job, an edge per
// parent and child, the failure in red.
func TestFlowPageDrawsEveryStep(t *testing.T) {
	s := newSite(t, map[string]string{
		"first.sh":  "# next: agent.run.second\necho\n",
		"second.sh": "# next: agent.run.third\necho\n",
		"third.sh":  "echo\n",
	}, thirdBreaks)
	s.publish("first", "flow-1", `{}`)
	var third string
	for _, r := range s.flowEnds("flow-1", 3) {
		if r.Function == "third" {
			third = r.ID
		}
	}
	s.do("open the flow", chromedp.Navigate(s.url+"/flows/flow-1"), chromedp.WaitVisible(`svg#flow`))
	count := func(sel string) int {
		return get(s, "count "+sel, chromedp.Evaluate[int](`document.querySelectorAll("`+sel+`").length`))
	}
	if n := count("svg#flow g.step"); n != 3 {
		t.Fatalf("%d steps drawn, want 3", n)
	}
	if n := count("svg#flow g.step rect.bar"); n != 3 {
		t.Fatalf("%d bars drawn, want 3", n)
	}
	if n := count("svg#flow path.edge"); n != 2 {
		t.Fatalf("%d parent-child edges drawn, want 2", n)
	}
	if n := count(`svg#flow g.step.status-failed[data-job='` + third + `']`); n != 1 {
		t.Fatalf("the failed step %s is not drawn as failed", third)
	}
	fill := get(s, "read the failed bar's colour", chromedp.Evaluate[string](`getComputedStyle(document.querySelector("g.status-failed rect.bar")).fill`))
	if fill != "rgb(207, 34, 46)" {
		t.Fatalf("the failed bar is filled %q, want red", fill)
	}
	s.screenshot("flow")
}

// A dead letter is replayed from its page, after a confirm: the new job runs, and the letter
// says what replayed it.
func TestDeadLetterReplay(t *testing.T) {
	var broken sync.Once
	s := newSite(t, map[string]string{"fragile.sh": "echo\n"}, fakeRunner{
		"fragile": func(context.Context, *jobtype.Job) *jobtype.Outcome {
			failed := false
			broken.Do(func() { failed = true })
			if failed {
				return &jobtype.Outcome{Err: errors.New("broken for now"), ExitCode: 4}
			}
			return &jobtype.Outcome{Result: []byte(`"fixed"`)}
		},
	})
	s.publish("fragile", "fragile-1", `{"n":1}`)
	if rec := s.h.Record("fragile-1"); rec.Status != jobtype.Failed {
		t.Fatalf("first run %s, want failed", rec.Status)
	}
	s.do("open the dead letters", chromedp.Navigate(s.url+"/dead"), chromedp.WaitVisible(`tr[data-job="fragile-1"]`))
	s.screenshot("dead")
	s.do("replay it", chromedp.Click(`tr[data-job="fragile-1"] button.replay`), chromedp.WaitVisible(`tr[data-job="fragile-1"] td a[href^="/jobs/"]:not([href="/jobs/fragile-1"])`))
	if d := s.dialogsSeen(); len(d) != 1 || !strings.HasPrefix(d[0], "confirm: Replay job fragile-1") {
		t.Fatalf("dialogs %q, want one confirm for the replay", d)
	}
	replay := get(s, "read the replay's id", chromedp.Text(`tr[data-job="fragile-1"] td a[href^="/jobs/"]:not([href="/jobs/fragile-1"])`))
	if rec := s.h.Record(replay); rec.Status != jobtype.Succeeded || rec.ReplayedFrom != "fragile-1" {
		t.Fatalf("the replay %s: %+v", replay, rec)
	}
	if !hasLog(s.h, "dashboard: dead letter replayed") {
		t.Fatal("the host's log does not record the replay and who asked")
	}
	s.do("see the arguments on the failed job", chromedp.Navigate(s.url+"/jobs/fragile-1"), chromedp.WaitVisible(`#job-args`))
	if args := get(s, "read the arguments", chromedp.Text(`#job-args`)); !strings.Contains(args, `"n": 1`) {
		t.Fatalf("arguments %q", args)
	}
}

// The functions page shows each function's annotations and counts, and a refused file's
// reason.
func TestFunctionsPage(t *testing.T) {
	s := newSite(t, map[string]string{
		"hello.sh":  "# schedule: @every 1h\n# secrets: api_key\necho\n",
		"jailed.sh": "# sandbox\n# network: proxy api.example.com\necho\n",
		"bad.sh":    "# retries: lots\necho\n",
	}, fakeRunner{})
	s.publish("hello", "fn-job", `{}`)
	s.h.Record("fn-job")
	s.do("open the functions", chromedp.Navigate(s.url+"/functions"), chromedp.WaitVisible(`tr[data-function="hello"]`))
	row := get(s, "read hello's row", chromedp.Text(`tr[data-function="hello"]`))
	// hello is not jailed: it has the host's network, not the proxy its annotations default to.
	for _, want := range []string{"@every 1h", "api_key", "test", "100%", "the host's (not jailed)"} {
		if !strings.Contains(row, want) {
			t.Errorf("hello's row %q lacks %q", row, want)
		}
	}
	if jailed := get(s, "read jailed's row", chromedp.Text(`tr[data-function="jailed"]`)); !strings.Contains(jailed, "proxy api.example.com") {
		t.Errorf("jailed's row %q lacks its network, proxy api.example.com", jailed)
	}
	if refused := get(s, "read the refusals", chromedp.Text(`ul.refused`)); !strings.Contains(refused, "bad.sh") {
		t.Fatalf("refusals %q, want bad.sh's", refused)
	}
	s.screenshot("functions")
}

// An old version of a volume is restored from its page, after a confirm: the next checkout
// reads the restored state. One file of a version downloads as an attachment.
func TestVolumeRestore(t *testing.T) {
	h := hosttest.NewEngine(t, map[string]string{"hello.sh": "echo\n"}, fakeRunner{})
	js, err := jetstream.New(h.NC)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b, err := objstore.NewJetStreamBackend(ctx, js, objstore.DefaultJetStreamBucket, 1)
	if err != nil {
		t.Fatal(err)
	}
	vols, err := objstore.New(ctx, js, b, objstore.Options{CacheDir: t.TempDir(), Log: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"remember the milk", "forgot everything"} {
		notes(t, vols, "notes", text)
	}
	s := openSite(t, h, dashboard.New(dashboard.Config{NC: h.NC, FunctionsDir: h.FnDir, Volumes: vols, Log: zap.NewNop()}))

	s.do("open the volumes", chromedp.Navigate(s.url+"/volumes"), chromedp.WaitVisible(`tr[data-volume="notes"]`))
	s.screenshot("volumes")
	s.do("open the volume", chromedp.Click(`tr[data-volume="notes"] a`), chromedp.WaitVisible(`tr[data-version="2"]`))
	s.screenshot("volume")
	s.do("restore version 1", chromedp.Click(`tr[data-version="1"] button.restore`), chromedp.WaitVisible(`tr[data-version="3"]`))
	if d := s.dialogsSeen(); len(d) != 1 || !strings.HasPrefix(d[0], "confirm: Make a new version of notes equal to version 1") {
		t.Fatalf("dialogs %q, want one confirm for the restore", d)
	}
	if got := notes(t, vols, "notes", ""); got != "remember the milk" {
		t.Fatalf("after the restore the volume holds %q, want version 1's", got)
	}

	href := get(s, "find the file's link", chromedp.Evaluate[string](`document.querySelector('tr[data-path="notes.txt"] a').href`))
	resp, err := http.Get(href)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "remember the milk" || resp.Header.Get("Content-Disposition") != `attachment; filename=notes.txt` {
		t.Fatalf("download: %q, %v", body, resp.Header)
	}
}

// notes checks the volume out as a job's run would, returns its notes.txt, and when write is
// not "" writes that instead and commits it as a new version.
func notes(t *testing.T, vols *objstore.Volumes, name, write string) string {
	t.Helper()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "vol")
	m, err := vols.Mount(ctx, name, dir, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release(ctx)
	file := filepath.Join(dir, "notes.txt")
	if write == "" {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if err := os.WriteFile(file, []byte(write), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Commit(ctx, "writer"); err != nil {
		t.Fatal(err)
	}
	return write
}

// A job run for real, in the jail, shows its output on its page as it printed it, markup and
// all, as text.
func TestJailedJobOnItsPage(t *testing.T) {
	findChromium(t)
	h := hosttest.New(t, map[string]string{"shout.sh": "# sandbox\necho '<script>alert(1)</script>'\necho 'done' >&2\necho '{\"said\":2}'\n"})
	s := openSite(t, h, h.Web())
	s.publish("shout", "jailed-job", `{}`)
	if rec := h.Record("jailed-job"); rec.Status != jobtype.Succeeded {
		t.Fatalf("the jailed job: %+v", rec)
	}
	s.do("open the job", chromedp.Navigate(s.url+"/jobs/jailed-job"), chromedp.WaitVisible(`#log-end[data-status="succeeded"]`))
	if log := get(s, "read the log", chromedp.Text(`#job-log`)); !strings.Contains(log, "<script>alert(1)</script>") || !strings.Contains(log, "done") {
		t.Fatalf("log %q", log)
	}
	if result := get(s, "read the result", chromedp.Text(`#job-result`)); !strings.Contains(result, `"said": 2`) {
		t.Fatalf("result %q", result)
	}
	if d := s.dialogsSeen(); len(d) != 0 {
		t.Fatalf("the job's output ran script: dialogs %q", d)
	}
	s.screenshot("job-jailed")
}

// A step waiting for approval is decided from its page: its comment goes with the decision,
// its next step runs, and the page says who approved. Its flow's page offers no cancel once
// every job has ended.
func TestJobPageApproves(t *testing.T) {
	s := newSite(t, map[string]string{"plan.sh": "# approve\n# next: agent.run.apply\necho\n", "apply.sh": "echo\n"}, fakeRunner{
		"plan": func(context.Context, *jobtype.Job) *jobtype.Outcome {
			return &jobtype.Outcome{Result: []byte(`{"change":"x"}`)}
		},
	})
	s.publish("plan", "plan-d", `{}`)
	s.h.Eventually("the step waits for a decision", func() bool {
		rec, err := s.h.Store.Get(context.Background(), "plan-d")
		return err == nil && rec.Status == jobtype.Waiting
	})
	s.do("open the waiting job", chromedp.Navigate(s.url+"/jobs/plan-d"), chromedp.WaitVisible(`#approve`))
	if status := get(s, "read the status", chromedp.Text(`#job-status`)); status != "waiting" {
		t.Fatalf("status %q", status)
	}
	s.screenshot("job-waiting")
	s.do("approve it", chromedp.SendKeys(`#decide input[name=comment]`, "go ahead"), chromedp.Click(`#approve`), chromedp.WaitVisible(`#approval`))
	if said := get(s, "read the decision", chromedp.Text(`#approval`)); !strings.Contains(said, "approved by the dashboard (") || !strings.Contains(said, "go ahead") {
		t.Fatalf("the page says %q", said)
	}
	rec := s.h.Record("plan-d")
	if rec.Status != jobtype.Succeeded || rec.Approval.Comment != "go ahead" {
		t.Fatalf("record %+v", rec)
	}
	recs, err := s.h.Store.Recent(context.Background(), jobs.Filter{Function: "apply"}, 0)
	if err != nil || len(recs) != 1 || recs[0].ParentJob != "plan-d" {
		t.Fatalf("apply's records %v, %v", recs, err)
	}
	s.h.Record(recs[0].ID)
	s.do("open the flow", chromedp.Navigate(s.url+"/flows/plan-d"), chromedp.WaitVisible(`#flow`))
	if n := get(s, "look for a cancel", chromedp.Evaluate[int](`document.querySelectorAll("#cancel-flow").length`)); n != 0 {
		t.Fatal("a flow whose jobs have all ended offers a cancel")
	}
}
