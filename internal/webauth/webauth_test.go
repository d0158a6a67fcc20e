package webauth

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

const token = "s3cret-token-0123456789"

// inner is the guarded handler: it answers 200 "inner|" and who the guard says sent it.
var inner = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("inner|" + Who(r))) })

func TestGuard(t *testing.T) {
	withToken := New(Config{Token: token, Loopback: true}, zaptest.NewLogger(t))
	public := New(Config{Token: token}, zaptest.NewLogger(t))
	open := New(Config{Loopback: true}, zaptest.NewLogger(t))
	session := login(t, withToken).Value
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
		{name: "login cookie", g: withToken, method: "GET", target: "/jobs", hdr: map[string]string{"Cookie": CookieName + "=" + session}, want: 200, reached: true, who: "login session " + sessionKey(session)[:8] + " from 192.0.2.1:1234"},
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
			hdr: map[string]string{"Cookie": CookieName + "=" + session, "Sec-Fetch-Site": "same-site"}, want: 403},
		{name: "foreign Origin POST → 403", g: withToken, method: "POST", target: "/jobs/x/cancel",
			hdr: map[string]string{"Cookie": CookieName + "=" + session, "Origin": "https://evil.example"}, want: 403},
		{name: "same-origin POST", g: withToken, method: "POST", target: "/jobs/x/cancel",
			hdr: map[string]string{"Cookie": CookieName + "=" + session, "Sec-Fetch-Site": "same-origin"}, want: 200, reached: true},
		{name: "matching Origin POST", g: withToken, method: "POST", target: "/jobs/x/cancel", host: "127.0.0.1:8080",
			hdr: map[string]string{"Cookie": CookieName + "=" + session, "Origin": "http://127.0.0.1:8080"}, want: 200, reached: true},
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
				assertSessionCookie(t, w, false)
			}
		})
	}
}

// assertSessionCookie checks the login cookie a response set: a session id that is not the
// token, HttpOnly, SameSite=Strict, Path=/, no Domain, lasting the session's time; over TLS a
// __Host- cookie that is Secure, over plain HTTP the unprefixed name without Secure (browsers
// refuse __Host- cookies that are not Secure).
func assertSessionCookie(t *testing.T, w *httptest.ResponseRecorder, tls bool) *http.Cookie {
	t.Helper()
	name := CookieName
	if tls {
		name = SecureCookieName
	}
	for _, c := range w.Result().Cookies() {
		if c.Name != name {
			t.Errorf("cookie %q set, want only %q", c.Name, name)
			continue
		}
		if c.Value == "" || strings.Contains(c.Value, token) || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Domain != "" ||
			c.Secure != tls || c.MaxAge != int(DefaultSessionTTL/time.Second) {
			t.Fatalf("cookie %+v: want a session id, HttpOnly, SameSite=Strict, Path=/, no Domain, Secure %v, Max-Age %d", c, tls, int(DefaultSessionTTL/time.Second))
		}
		return c
	}
	t.Fatalf("no %s cookie set; headers %v", name, w.Header())
	return nil
}

// login logs in through the form, as a browser would, and returns the cookie it got.
func login(t *testing.T, g *Guard) *http.Cookie {
	t.Helper()
	r := httptest.NewRequest("POST", "/login", strings.NewReader("token="+token+"&next=%2F"))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("Sec-Fetch-Site", "same-origin")
	w := httptest.NewRecorder()
	g.Wrap(inner).ServeHTTP(w, r)
	if w.Code != http.StatusSeeOther {
		t.Fatalf("login: %d %s", w.Code, w.Body)
	}
	return assertSessionCookie(t, w, false)
}

// get asks for a guarded page with cookie c and returns the status.
func get(g *Guard, c *http.Cookie) int {
	r := httptest.NewRequest("GET", "/jobs", nil)
	if c != nil {
		r.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
	}
	w := httptest.NewRecorder()
	g.Wrap(inner).ServeHTTP(w, r)
	return w.Code
}

// The red team's login cookie was HMAC(token, constant): the same on every login, computable
// offline by anyone who once held the token, and still good after POST /logout. Sessions are
// random, held by the host, each login its own, and ended by logging out.
func TestSessionsAreRandomAndEndWithLogout(t *testing.T) {
	g := New(Config{Token: token}, zaptest.NewLogger(t))
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write([]byte("agent-host web login v1"))
	if status := get(g, &http.Cookie{Name: CookieName, Value: hex.EncodeToString(mac.Sum(nil))}); status != http.StatusUnauthorized {
		t.Fatalf("the cookie computed from the token: %d, want 401", status)
	}
	if status := get(g, &http.Cookie{Name: CookieName, Value: token}); status != http.StatusUnauthorized {
		t.Fatalf("the token as the cookie: %d, want 401", status)
	}
	first, second := login(t, g), login(t, g)
	if first.Value == second.Value {
		t.Fatalf("two logins got the same session %q", first.Value)
	}
	if get(g, first) != http.StatusOK || get(g, second) != http.StatusOK {
		t.Fatal("a fresh session does not let its browser in")
	}

	r := httptest.NewRequest("POST", "/logout", nil)
	r.Header.Set("Sec-Fetch-Site", "same-origin")
	r.AddCookie(&http.Cookie{Name: first.Name, Value: first.Value})
	w := httptest.NewRecorder()
	g.Wrap(inner).ServeHTTP(w, r)
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/login" {
		t.Fatalf("logout: %d to %q", w.Code, w.Header().Get("Location"))
	}
	cleared := false
	for _, c := range w.Result().Cookies() {
		cleared = cleared || c.Name == CookieName && c.MaxAge < 0
	}
	if !cleared {
		t.Errorf("logout did not clear the cookie: %v", w.Result().Cookies())
	}
	// A copy of the cookie kept after logging out (another tab, a stolen copy) is worth nothing.
	if status := get(g, first); status != http.StatusUnauthorized {
		t.Fatalf("the logged-out session: %d, want 401", status)
	}
	if status := get(g, second); status != http.StatusOK {
		t.Fatalf("the other session, not logged out: %d, want 200", status)
	}
	// A logged-out session cannot be logged back in by a page of another site either.
	r = httptest.NewRequest("POST", "/logout", nil)
	r.Header.Set("Sec-Fetch-Site", "cross-site")
	r.AddCookie(&http.Cookie{Name: second.Name, Value: second.Value})
	w = httptest.NewRecorder()
	g.Wrap(inner).ServeHTTP(w, r)
	if w.Code != http.StatusForbidden || get(g, second) != http.StatusOK {
		t.Fatalf("a cross-site logout: %d, and the session answers %d", w.Code, get(g, second))
	}
}

func TestSessionsExpire(t *testing.T) {
	g := New(Config{Token: token, SessionTTL: time.Hour}, zaptest.NewLogger(t))
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	g.now = func() time.Time { return now }
	r := httptest.NewRequest("GET", "/jobs?token="+token, nil)
	w := httptest.NewRecorder()
	g.Wrap(inner).ServeHTTP(w, r)
	var c *http.Cookie
	for _, got := range w.Result().Cookies() {
		c = got
	}
	if w.Code != http.StatusSeeOther || c == nil || c.MaxAge != 3600 {
		t.Fatalf("token link: %d, cookie %+v; want 303 and a cookie of an hour", w.Code, c)
	}
	now = now.Add(time.Hour - time.Second)
	if status := get(g, c); status != http.StatusOK {
		t.Fatalf("a second before its expiry: %d", status)
	}
	now = now.Add(time.Second)
	if status := get(g, c); status != http.StatusUnauthorized {
		t.Fatalf("at its expiry: %d, want 401", status)
	}
}

// Over TLS the cookie is a __Host- cookie, Secure; the plain-HTTP name is not accepted there.
func TestSessionCookieOverTLS(t *testing.T) {
	g := New(Config{Token: token}, zaptest.NewLogger(t))
	r := httptest.NewRequest("POST", "https://host.localhost/login", strings.NewReader("token="+token))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("Sec-Fetch-Site", "same-origin")
	w := httptest.NewRecorder()
	g.Wrap(inner).ServeHTTP(w, r)
	c := assertSessionCookie(t, w, true)
	for name, want := range map[string]int{SecureCookieName: 200, CookieName: 401} {
		r := httptest.NewRequest("GET", "https://host.localhost/jobs", nil)
		r.AddCookie(&http.Cookie{Name: name, Value: c.Value})
		w := httptest.NewRecorder()
		g.Wrap(inner).ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("over TLS with the session as %s: %d, want %d", name, w.Code, want)
		}
	}
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
		// Browsers drop tabs and newlines from a Location and read \ as /: each is //evil.host.
		{"a tab after the slash stays here", "token=" + token + "&next=%2F%09%2Fevil.host%2Fx", 303, "/"},
		{"a newline after the slash stays here", "token=" + token + "&next=%2F%0A%2Fevil.host", 303, "/"},
		{"a backslash stays here", "token=" + token + "&next=%2F%5Cevil.host", 303, "/"},
		{"a backslash later stays here", "token=" + token + "&next=%2F%5C%5Cevil.host", 303, "/"},
		{"a leading space stays here", "token=" + token + "&next=+%2F%2Fevil.host", 303, "/"},
		{"javascript: stays here", "token=" + token + "&next=javascript%3Aalert(1)", 303, "/"},
		{"a NUL stays here", "token=" + token + "&next=%2F%00%2Fevil.host", 303, "/"},
		{"a path with a query", "token=" + token + "&next=%2Fjobs%3Fstatus%3Dfailed", 303, "/jobs?status=failed"},
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
			assertSessionCookie(t, w, false)
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

// The red team's 400 POST /login requests that sent their headers and then stalled held 400
// descriptors for as long as they liked. Every body behind the guard has BodyTimeout to arrive:
// a stalled one gets 408, and its connection is closed. A body that did arrive leaves its
// handler all the time it needs (a ?wait=, a log stream).
func TestStalledBodiesAreCutOff(t *testing.T) {
	const bodyTimeout = 200 * time.Millisecond
	g := New(Config{Token: token, BodyTimeout: bodyTimeout}, zaptest.NewLogger(t))
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			if IsBodyTimeout(err) {
				w.WriteHeader(http.StatusRequestTimeout)
				return
			}
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if r.URL.Path == "/slow" {
			// Longer than the body's deadline, after the body: the request must stay alive.
			select {
			case <-r.Context().Done():
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			case <-time.After(5 * bodyTimeout):
			}
		}
		w.Write([]byte("read"))
	})
	srv := httptest.NewServer(g.Wrap(handler))
	defer srv.Close()

	stall := func(t *testing.T, head string) string {
		t.Helper()
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// Only a bound for a broken test; the server answers after bodyTimeout.
		c.SetDeadline(time.Now().Add(time.Minute))
		if _, err := io.WriteString(c, head+"Content-Length: 1000\r\n\r\ntoken="); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer to a stalled body (the server still waits for it): %v", err)
		}
		resp.Body.Close()
		return resp.Status
	}
	t.Run("login form", func(t *testing.T) {
		if got := stall(t, "POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nSec-Fetch-Site: same-origin\r\nContent-Type: application/x-www-form-urlencoded\r\n"); !strings.HasPrefix(got, "408") {
			t.Fatalf("status %s, want 408", got)
		}
	})
	t.Run("a guarded POST", func(t *testing.T) {
		if got := stall(t, "POST /run/hello HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "+token+"\r\n"); !strings.HasPrefix(got, "408") {
			t.Fatalf("status %s, want 408", got)
		}
	})
	t.Run("a handler that outlives the deadline after reading its body", func(t *testing.T) {
		req, _ := http.NewRequest("POST", srv.URL+"/slow", strings.NewReader(`{"a":1}`))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || string(b) != "read" {
			t.Fatalf("%d %s: the body's deadline ended the request after the body had come", resp.StatusCode, b)
		}
	})
}

func TestLoadOrCreateTokenFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config", "host", "http.token")
	first, created, err := LoadOrCreateTokenFile(p)
	if err != nil || !created || len(first) != 64 {
		t.Fatalf("first start: %q, created %v, %v", first, created, err)
	}
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode %v, %v; want 0600", st.Mode().Perm(), err)
	}
	if dir, _ := os.Stat(filepath.Dir(p)); dir.Mode().Perm() != 0o700 {
		t.Fatalf("token directory mode %v, want 0700", dir.Mode().Perm())
	}
	again, created, err := LoadOrCreateTokenFile(p)
	if err != nil || created || again != first {
		t.Fatalf("second start: %q, created %v, %v; want the same token, kept", again, created, err)
	}
}
