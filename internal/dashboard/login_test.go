package dashboard_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/webauth"
)

// sessionCookie reads the login cookie the browser holds for the site, HttpOnly included
// (which the page's own script cannot read).
func (s *site) sessionCookie() *network.Cookie {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, actionBound)
	defer cancel()
	res, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{s.url}})
	if err != nil {
		s.t.Fatalf("read the browser's cookies: %v", err)
	}
	for _, c := range res.Cookies {
		if c.Name == webauth.CookieName {
			return c
		}
	}
	return nil
}

// status asks for a page with cookie c (as a copy of the browser's kept elsewhere would) and
// returns the status.
func (s *site) status(path string, c *network.Cookie) int {
	s.t.Helper()
	req, _ := http.NewRequest("GET", s.url+path, nil)
	req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// The red team's web sessions, in a real browser: the login cookie was the same on every login
// and still valid after logging out, and `next=/%09/evil.host/x` sent the browser off-site after
// logging in (browsers drop the tab, leaving //evil.host/x). Now each login is a session of its
// own, held by the host; the dashboard's Log out ends it, so a copy of the cookie kept from
// before is refused; and a login's next stays on this host.
func TestLoginSessionsInTheBrowser(t *testing.T) {
	const token = "a-long-enough-test-token-0123456789"
	h := hosttest.NewEngine(t, map[string]string{"hello.sh": "echo\n"}, fakeRunner{})
	guard := webauth.New(webauth.Config{Token: token, Loopback: true}, zap.NewNop())
	s := openSite(t, h, guard.Wrap(h.Web()))
	host := strings.TrimPrefix(s.url, "http://")

	logIn := func(path string) {
		t.Helper()
		s.do("open "+path, chromedp.Navigate(s.url+path), chromedp.WaitVisible(`input[type="password"]`))
		s.do("log in", chromedp.SendKeys(`input[type="password"]`, token), chromedp.Submit(`input[type="password"]`),
			chromedp.WaitVisible(`form.logout button`))
		if at := get(s, "where the login led", chromedp.Location()); !strings.HasPrefix(at, s.url+"/") {
			t.Fatalf("after logging in from %s the browser is at %s, not on %s", path, at, host)
		}
	}

	logIn("/login?next=/%09/evil.host/x")
	first := s.sessionCookie()
	if first == nil {
		t.Fatal("no login cookie after logging in")
	}
	if strings.Contains(first.Value, token) || !first.HTTPOnly || first.SameSite != network.CookieSameSiteStrict || first.Path != "/" ||
		strings.HasPrefix(first.Domain, ".") || first.Secure {
		t.Fatalf("login cookie %+v: want a session id, HttpOnly, SameSite=Strict, Path=/, host-only, not Secure over plain HTTP", first)
	}
	s.screenshot("logged-in")

	s.do("log out", chromedp.Click(`form.logout button`), chromedp.WaitVisible(`input[type="password"]`))
	if c := s.sessionCookie(); c != nil {
		t.Errorf("the browser still holds a login cookie after logging out: %+v", c)
	}
	if got := s.status("/jobs", first); got != http.StatusUnauthorized {
		t.Fatalf("a copy of the logged-out session's cookie: GET /jobs %d, want 401", got)
	}

	logIn("/login?next=" + url.QueryEscape("/jobs?status=succeeded"))
	if at := get(s, "where the login led", chromedp.Location()); at != s.url+"/jobs?status=succeeded" {
		t.Fatalf("a local next led to %s", at)
	}
	second := s.sessionCookie()
	if second == nil || second.Value == first.Value {
		t.Fatalf("the second login got session %v, the first one's was %q: want a new one", second, first.Value)
	}
	if got := s.status("/jobs", second); got != http.StatusOK {
		t.Fatalf("the new session: GET /jobs %d", got)
	}
}
