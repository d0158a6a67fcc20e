package dashboard_test

import (
	"context"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/webauth"
)

// A schedule is paused and resumed from its page, each after a confirm; the pause is the one
// every host reads (the same store `host schedules` lists), and it names the dashboard.
func TestSchedulePauseAndResume(t *testing.T) {
	// A schedule that does not fire during the test: only the pause is under test.
	s := newSite(t, map[string]string{"nightly.sh": "# schedule: 0 3 1 1 *\necho\n"}, fakeRunner{})
	c, err := client.New(context.Background(), s.h.NC)
	if err != nil {
		t.Fatal(err)
	}
	paused := func() (bool, string) {
		entries, err := c.Schedules(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Function == "nightly" {
				return e.Paused, e.PausedBy
			}
		}
		return false, "<not listed>"
	}
	s.h.Eventually("the host records nightly's schedule", func() bool { _, by := paused(); return by != "<not listed>" })

	s.do("open the schedules", chromedp.Navigate(s.url+"/schedules"), chromedp.WaitVisible(`tr[data-function="nightly"][data-paused="false"]`))
	s.screenshot("schedules")
	s.do("pause it", chromedp.Click(`tr[data-function="nightly"] button.pause`), chromedp.WaitVisible(`tr[data-function="nightly"][data-paused="true"]`))
	if p, by := paused(); !p || !strings.Contains(by, "the dashboard") {
		t.Fatalf("after pause: paused %v by %q, want paused by the dashboard", p, by)
	}
	s.do("resume it", chromedp.Click(`tr[data-function="nightly"] button.resume`), chromedp.WaitVisible(`tr[data-function="nightly"][data-paused="false"]`))
	if p, _ := paused(); p {
		t.Fatal("after resume the schedule is still paused")
	}
	d := s.dialogsSeen()
	if len(d) != 2 || !strings.HasPrefix(d[0], "confirm: Pause the schedule of nightly") || !strings.HasPrefix(d[1], "confirm: Resume the schedule of nightly") {
		t.Fatalf("dialogs %q, want a confirm for the pause and one for the resume", d)
	}
	if !hasLog(s.h, "dashboard: schedule paused") || !hasLog(s.h, "dashboard: schedule resumed") {
		t.Fatal("the host's log does not record the pause and resume and who asked")
	}
}

// With a token, the browser is sent to the login page, logs in with the token, and reaches
// the jobs page; the cookie it holds is not the token.
func TestLoginWithToken(t *testing.T) {
	const token = "a-long-enough-test-token-0123456789"
	h := hosttest.NewEngine(t, map[string]string{"hello.sh": "echo\n"}, fakeRunner{})
	guard := webauth.New(webauth.Config{Token: token, Loopback: true}, zap.NewNop())
	s := openSite(t, h, guard.Wrap(h.Web()))
	s.publish("hello", "job-behind-login", `{}`)

	// Without the token a client that is not the browser gets 401 too.
	jar, _ := cookiejar.New(nil)
	resp, err := (&http.Client{Jar: jar}).Get(s.url + "/jobs")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /jobs without a token: %d, want 401", resp.StatusCode)
	}

	s.do("open the jobs page", chromedp.Navigate(s.url+"/jobs"), chromedp.WaitVisible(`input[type="password"]`))
	s.screenshot("login")
	s.do("log in", chromedp.SendKeys(`input[type="password"]`, token), chromedp.Submit(`input[type="password"]`),
		chromedp.WaitVisible(`tr[data-job="job-behind-login"]`))
	cookies := get(s, "read the cookies", chromedp.Evaluate[string](`document.cookie`))
	if strings.Contains(cookies, token) {
		t.Fatalf("the page's script can read the token in a cookie: %q", cookies)
	}
}
