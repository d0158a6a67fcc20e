package webauth

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"
)

const token = "s3cret-token-0123456789"

// inner is the guarded handler: it answers 200 "inner|" and who the guard says sent it.
var inner = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("inner|" + Who(r))) })

func TestGuard(t *testing.T) {
	withToken := New(Config{Token: token, Loopback: true}, zaptest.NewLogger(t))
	public := New(Config{Token: token}, zaptest.NewLogger(t))
	open := New(Config{Loopback: true}, zaptest.NewLogger(t))
	cases := []struct {
		name     string
		g        *Guard
		method   string
		target   string
		host     string
		hdr      map[string]string
		want     int
		reached  bool   // the inner handler answered
		who      string // what Who said there
		location string // the redirect's target, when want is a redirect
	}{
		{name: "no token → 401", g: withToken, method: "POST", target: "/run/f", want: 401},
		{name: "wrong token → 401", g: withToken, method: "POST", target: "/run/f", hdr: map[string]string{"Authorization": "Bearer " + token + "x"}, want: 401},
		{name: "not bearer → 401", g: withToken, method: "POST", target: "/run/f", hdr: map[string]string{"Authorization": "Basic " + token}, want: 401},
		{name: "right token", g: withToken, method: "POST", target: "/run/f", hdr: map[string]string{"Authorization": "Bearer " + token}, want: 200, reached: true, who: "bearer token from 192.0.2.1:1234"},
		{name: "login cookie", g: withToken, method: "GET", target: "/jobs", hdr: map[string]string{"Cookie": CookieName + "=" + withToken.cookie}, want: 200, reached: true, who: "login cookie from 192.0.2.1:1234"},
		{name: "the token is not the cookie", g: withToken, method: "GET", target: "/jobs", hdr: map[string]string{"Cookie": CookieName + "=" + token}, want: 401},
		{name: "a page without token shows the login form", g: withToken, method: "GET", target: "/jobs", hdr: map[string]string{"Accept": "text/html"}, want: 401},
		{name: "token link logs in and drops the token", g: withToken, method: "GET", target: "/jobs?status=failed&token=" + token, want: 303, location: "/jobs?status=failed"},
		{name: "wrong token link", g: withToken, method: "GET", target: "/jobs?token=nope", want: 401},
		{name: "hooks keep their own auth", g: withToken, method: "POST", target: "/hooks/gh", want: 200, reached: true},
		{name: "hooks are not CSRF-checked: senders are servers", g: withToken, method: "POST", target: "/hooks/gh", hdr: map[string]string{"Sec-Fetch-Site": "cross-site"}, want: 200, reached: true},
		{name: "healthz open on loopback", g: withToken, method: "GET", target: "/healthz", want: 200, reached: true},
		{name: "metrics open on loopback", g: withToken, method: "GET", target: "/metrics", want: 200, reached: true},
		{name: "healthz guarded elsewhere", g: public, method: "GET", target: "/healthz", want: 401},
		{name: "metrics guarded elsewhere", g: public, method: "GET", target: "/metrics", want: 401},
		{name: "cross-site POST → 403", g: withToken, method: "POST", target: "/jobs/x/cancel",
			hdr: map[string]string{"Authorization": "Bearer " + token, "Sec-Fetch-Site": "cross-site"}, want: 403},
		{name: "same-site POST → 403", g: withToken, method: "POST", target: "/jobs/x/cancel",
			hdr: map[string]string{"Cookie": CookieName + "=" + withToken.cookie, "Sec-Fetch-Site": "same-site"}, want: 403},
		{name: "foreign Origin POST → 403", g: withToken, method: "POST", target: "/jobs/x/cancel",
			hdr: map[string]string{"Cookie": CookieName + "=" + withToken.cookie, "Origin": "https://evil.example"}, want: 403},
		{name: "same-origin POST", g: withToken, method: "POST", target: "/jobs/x/cancel",
			hdr: map[string]string{"Cookie": CookieName + "=" + withToken.cookie, "Sec-Fetch-Site": "same-origin"}, want: 200, reached: true},
		{name: "matching Origin POST", g: withToken, method: "POST", target: "/jobs/x/cancel", host: "127.0.0.1:8080",
			hdr: map[string]string{"Cookie": CookieName + "=" + withToken.cookie, "Origin": "http://127.0.0.1:8080"}, want: 200, reached: true},
		{name: "no token on loopback", g: open, method: "POST", target: "/run/f", want: 200, reached: true, who: "loopback, no token from 192.0.2.1:1234"},
		{name: "no token: localhost", g: open, method: "GET", target: "/", host: "localhost:8080", want: 200, reached: true},
		{name: "no token: a rebound DNS name → 403", g: open, method: "GET", target: "/", host: "evil.example:8080", want: 403},
		{name: "no token: cross-site POST → 403", g: open, method: "POST", target: "/run/f", hdr: map[string]string{"Sec-Fetch-Site": "cross-site"}, want: 403},
		{name: "login page", g: withToken, method: "GET", target: "/login", want: 200},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(c.method, c.target, nil)
			r.Host = "127.0.0.1:8080"
			if c.host != "" {
				r.Host = c.host
			}
			for k, v := range c.hdr {
				r.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			c.g.Wrap(inner).ServeHTTP(w, r)
			if w.Code != c.want {
				t.Fatalf("status %d, want %d: %s", w.Code, c.want, w.Body)
			}
			who, got := strings.CutPrefix(w.Body.String(), "inner|")
			if got != c.reached {
				t.Errorf("reached the guarded handler: %v, want %v", got, c.reached)
			}
			if c.who != "" && who != c.who {
				t.Errorf("Who %q, want %q", who, c.who)
			}
			for k, v := range Headers {
				if got := w.Header().Get(k); got != v {
					t.Errorf("%s: %q, want %q", k, got, v)
				}
			}
			if c.location != "" {
				if got := w.Header().Get("Location"); got != c.location {
					t.Errorf("Location %q, want %q", got, c.location)
				}
				assertSessionCookie(t, w, c.g.cookie)
			}
		})
	}
}

func assertSessionCookie(t *testing.T, w *httptest.ResponseRecorder, want string) {
	t.Helper()
	for _, c := range w.Result().Cookies() {
		if c.Name != CookieName {
			continue
		}
		if c.Value != want || c.Value == token || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
			t.Fatalf("cookie %+v: want the derived value, HttpOnly, SameSite=Strict", c)
		}
		return
	}
	t.Fatalf("no %s cookie set; headers %v", CookieName, w.Header())
}

func TestLoginForm(t *testing.T) {
	g := New(Config{Token: token}, zaptest.NewLogger(t))
	cases := []struct {
		name, form string
		want       int
		location   string
	}{
		{"right token", "token=" + token + "&next=%2Fjobs%2Fabc", 303, "/jobs/abc"},
		{"wrong token", "token=guess&next=%2Fjobs", 401, ""},
		{"an off-site next stays here", "token=" + token + "&next=%2F%2Fevil.example", 303, "/"},
		{"a URL next stays here", "token=" + token + "&next=https%3A%2F%2Fevil.example", 303, "/"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/login", strings.NewReader(c.form))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			r.Header.Set("Sec-Fetch-Site", "same-origin")
			w := httptest.NewRecorder()
			g.Wrap(inner).ServeHTTP(w, r)
			if w.Code != c.want {
				t.Fatalf("status %d, want %d: %s", w.Code, c.want, w.Body)
			}
			if c.location == "" {
				if len(w.Result().Cookies()) != 0 {
					t.Fatalf("a refused login set cookies: %v", w.Result().Cookies())
				}
				return
			}
			if got := w.Header().Get("Location"); got != c.location {
				t.Errorf("Location %q, want %q", got, c.location)
			}
			assertSessionCookie(t, w, g.cookie)
		})
	}
}

// The login page escapes what it echoes and has no inline script or style, which the CSP
// would block anyway.
func TestLoginPageEscapes(t *testing.T) {
	g := New(Config{Token: token}, zaptest.NewLogger(t))
	r := httptest.NewRequest("GET", `/login?next=/"><script>alert(1)</script>`, nil)
	w := httptest.NewRecorder()
	g.Wrap(inner).ServeHTTP(w, r)
	body := w.Body.String()
	for _, bad := range []string{"<script", "<style", " style="} {
		if strings.Contains(body, bad) {
			t.Errorf("login page contains %q:\n%s", bad, body)
		}
	}
	if !strings.Contains(body, `name="token"`) {
		t.Errorf("no token field:\n%s", body)
	}
}

func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, content, want, err string
	}{
		{"trimmed first line", "  " + token + "  \nsecond line\n", token, ""},
		{"too short", "short\n", "", "at least 16"},
		{"empty", "", "", "at least 16"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, c.name)
			if err := os.WriteFile(p, []byte(c.content), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := ReadTokenFile(p)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one saying %q", err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("%q, %v; want %q", got, err, c.want)
			}
		})
	}
	if _, err := ReadTokenFile(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("a missing file was read")
	}
}
