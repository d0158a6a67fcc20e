// Package webauth guards the host's web face: the dashboard, its API and POST /run. It asks for
// the bearer token of --http-token-file (a header, or a login cookie for browsers), refuses
// cross-site POSTs, and sends the security headers on every response. Webhooks keep their own
// authorization and never see the token.
package webauth

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
)

// CookieName is the login cookie's name.
const CookieName = "agent_host_session"

// Headers sent on every response: a page of the web face may show any user data (logs,
// results), so nothing but the host's own files may run, load, frame it or be posted to.
var Headers = map[string]string{
	"Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
	"X-Content-Type-Options":  "nosniff",
	"Referrer-Policy":         "same-origin",
}

// Config says what the guard asks for.
type Config struct {
	// Token is the bearer token every request needs; "" serves without one, which serve
	// allows only on a loopback address.
	Token string
	// Loopback says the listener only takes connections from this machine: /healthz and
	// /metrics then stay open (probes and scrapers hold no token); elsewhere they need it.
	Loopback bool
}

// ReadTokenFile reads a token file: its first line, trimmed. A short token is refused, since
// the token is all that stands between the network and running every function.
func ReadTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read --http-token-file: %w", err)
	}
	token, _, _ := strings.Cut(string(b), "\n")
	token = strings.TrimSpace(token)
	if len(token) < 16 {
		return "", fmt.Errorf("--http-token-file %s: the token has %d characters, want at least 16 (make one with `openssl rand -hex 32 > %s`)", path, len(token), path)
	}
	return token, nil
}

// Guard is the middleware.
type Guard struct {
	cfg    Config
	cookie string // the login cookie's value: derived from the token, never the token itself
	csrf   *http.CrossOriginProtection
	log    *zap.Logger
}

// New returns a guard for cfg.
func New(cfg Config, log *zap.Logger) *Guard {
	g := &Guard{cfg: cfg, log: log, csrf: http.NewCrossOriginProtection()}
	if cfg.Token != "" {
		mac := hmac.New(sha256.New, []byte(cfg.Token))
		mac.Write([]byte("agent-host web login v1"))
		g.cookie = hex.EncodeToString(mac.Sum(nil))
	}
	// A webhook sender is a server, never a browser acting for a logged-in user, and it
	// proves itself with its own signature.
	g.csrf.AddInsecureBypassPattern("POST /hooks/{source}")
	g.csrf.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.refuse(w, r, http.StatusForbidden, "cross-site request refused: a POST must come from a page of this host (Sec-Fetch-Site same-origin, or an Origin matching the Host)")
	}))
	return g
}

// Wrap guards next, and serves GET and POST /login and POST /logout itself.
func (g *Guard) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range Headers {
			w.Header().Set(k, v)
		}
		if err := g.csrf.Check(r); err != nil {
			g.refuse(w, r, http.StatusForbidden, "cross-site request refused: a POST must come from a page of this host (Sec-Fetch-Site same-origin, or an Origin matching the Host)")
			return
		}
		switch {
		case strings.HasPrefix(r.URL.Path, "/hooks/"):
			next.ServeHTTP(w, r)
			return
		case g.cfg.Token == "":
			// Without a token only loopback serves; a page of another site that a DNS name
			// rebound to 127.0.0.1 must not reach it either.
			if !loopbackHost(r.Host) {
				g.refuse(w, r, http.StatusForbidden, fmt.Sprintf("Host %q is not a loopback name: without --http-token-file the web face answers only to localhost and loopback addresses", r.Host))
				return
			}
			next.ServeHTTP(w, withWho(r, "loopback, no token"))
			return
		case g.cfg.Loopback && (r.URL.Path == "/healthz" || r.URL.Path == "/metrics"):
			next.ServeHTTP(w, r)
			return
		case r.URL.Path == "/login":
			g.login(w, r)
			return
		case r.URL.Path == "/logout" && r.Method == http.MethodPost:
			http.SetCookie(w, g.sessionCookie(r, "", -1))
			http.Redirect(w, r, "/login", http.StatusSeeOther)
			return
		}
		if r.Method == http.MethodGet && r.URL.Query().Has("token") {
			g.tokenLink(w, r)
			return
		}
		switch g.authorized(r) {
		case errNone:
			how := "login cookie"
			if r.Header.Get("Authorization") != "" {
				how = "bearer token"
			}
			next.ServeHTTP(w, withWho(r, how))
		case errWrong:
			g.unauthorized(w, r, "wrong token")
		default:
			g.unauthorized(w, r, "this needs the host's token (--http-token-file): send Authorization: Bearer <token>, or log in at /login")
		}
	})
}

type whoKey struct{}

func withWho(r *http.Request, how string) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), whoKey{}, how+" from "+r.RemoteAddr))
}

// Who names who made a request that the guard let through, for the log line of an action:
// how it was authorized and from where ("bearer token from 10.0.0.5:51234"). There is one
// token, so this is as close to a user as the host knows; "" for a request it did not guard.
func Who(r *http.Request) string {
	s, _ := r.Context().Value(whoKey{}).(string)
	return s
}

var (
	errNone    error
	errMissing = errors.New("missing")
	errWrong   = errors.New("wrong")
)

// authorized checks the bearer header, else the login cookie.
func (g *Guard) authorized(r *http.Request) error {
	if h := r.Header.Get("Authorization"); h != "" {
		token, ok := strings.CutPrefix(h, "Bearer ")
		if ok && g.tokenMatches(token) {
			return errNone
		}
		return errWrong
	}
	if c, err := r.Cookie(CookieName); err == nil {
		if subtle.ConstantTimeCompare([]byte(c.Value), []byte(g.cookie)) == 1 {
			return errNone
		}
		return errWrong
	}
	return errMissing
}

// tokenMatches compares in constant time, so the response time says nothing of how much of a
// guess was right.
func (g *Guard) tokenMatches(token string) bool {
	return subtle.ConstantTimeCompare([]byte(token), []byte(g.cfg.Token)) == 1
}

// tokenLink logs in from a link carrying ?token=: the token is exchanged for the cookie at
// once, and the browser sent on to the same URL without it, so the token does not stay in the
// address bar, the history or a Referer.
func (g *Guard) tokenLink(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	token := q.Get("token")
	if !g.tokenMatches(token) {
		g.unauthorized(w, r, "wrong token")
		return
	}
	q.Del("token")
	u := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
	g.log.Info("web login", zap.String("from", r.RemoteAddr), zap.String("by", "token link"))
	http.SetCookie(w, g.sessionCookie(r, g.cookie, 0))
	http.Redirect(w, r, u.String(), http.StatusSeeOther)
}

func (g *Guard) sessionCookie(r *http.Request, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: CookieName, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil}
}

//go:embed login.html
var loginHTML string

var loginPage = template.Must(template.New("login").Parse(loginHTML))

type loginData struct {
	Next, Error string
}

func (g *Guard) login(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		g.renderLogin(w, http.StatusOK, loginData{Next: safeNext(r.URL.Query().Get("next"))})
	case http.MethodPost:
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if err := r.ParseForm(); err != nil {
			g.renderLogin(w, http.StatusBadRequest, loginData{Error: "the form could not be read: " + err.Error()})
			return
		}
		next := safeNext(r.PostForm.Get("next"))
		if !g.tokenMatches(r.PostForm.Get("token")) {
			g.log.Warn("web login refused: wrong token", zap.String("from", r.RemoteAddr))
			g.renderLogin(w, http.StatusUnauthorized, loginData{Next: next, Error: "Wrong token."})
			return
		}
		g.log.Info("web login", zap.String("from", r.RemoteAddr), zap.String("by", "login form"))
		http.SetCookie(w, g.sessionCookie(r, g.cookie, 0))
		http.Redirect(w, r, next, http.StatusSeeOther)
	default:
		w.Header().Set("Allow", "GET, POST")
		g.refuse(w, r, http.StatusMethodNotAllowed, "GET or POST /login")
	}
}

func (g *Guard) renderLogin(w http.ResponseWriter, status int, d loginData) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if err := loginPage.Execute(w, d); err != nil {
		g.log.Debug("login page not sent", zap.Error(err))
	}
}

// safeNext keeps a redirect after login on this host: a path, never //other.example or a URL.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") {
		return "/"
	}
	return next
}

// unauthorized answers 401: a browser asking for a page gets the login form (so a bookmark
// of a page leads back to it), anything else a JSON error.
func (g *Guard) unauthorized(w http.ResponseWriter, r *http.Request, msg string) {
	g.log.Info("web request refused", zap.String("path", r.URL.Path), zap.String("from", r.RemoteAddr), zap.String("reason", msg))
	w.Header().Set("WWW-Authenticate", `Bearer realm="agent-host"`)
	if r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html") {
		g.renderLogin(w, http.StatusUnauthorized, loginData{Next: safeNext(r.URL.RequestURI()), Error: "Log in with the host's token."})
		return
	}
	writeError(w, http.StatusUnauthorized, msg)
}

func (g *Guard) refuse(w http.ResponseWriter, r *http.Request, status int, msg string) {
	g.log.Warn("web request refused", zap.String("path", r.URL.Path), zap.String("from", r.RemoteAddr), zap.Int("status", status), zap.String("reason", msg))
	writeError(w, status, msg)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// loopbackHost reports whether a request's Host names this machine.
func loopbackHost(hostport string) bool {
	h, _, err := net.SplitHostPort(hostport)
	if err != nil {
		h = hostport
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return bus.IsLoopback(h) || strings.HasSuffix(h, ".localhost")
}
