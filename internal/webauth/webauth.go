// Package webauth guards the host's web face: the dashboard, its API and POST /run. It asks who
// is there (the host's web token, a user's token, or for browsers a login session held by the
// host, made with either or through an OpenID provider), hands the handlers that person as a
// people.Principal, and checks each route against the act it needs (Routes, Require). It
// refuses cross-site POSTs and sends the security headers on every response. Webhooks and
// the signed approval links keep their own authorization and never see a token.
package webauth

import (
	"bytes"
	"context"
	"crypto/rand"
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
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/people"
)

// The login cookie's names. Over TLS it is a __Host- cookie: Secure, Path=/, no Domain, so
// that no other site, subdomain or plain-HTTP page can set or overwrite it. Browsers refuse a
// __Host- cookie without Secure, and Secure needs TLS, so over plain HTTP (loopback) it has the
// same attributes but Secure and a name without the prefix.
const (
	CookieName       = "agent_host_session"
	SecureCookieName = "__Host-agent_host_session"
)

const (
	// DefaultSessionTTL is how long a login lasts when Config.SessionTTL is zero.
	DefaultSessionTTL = 12 * time.Hour
	// DefaultBodyTimeout bounds the arrival of a request body when Config.BodyTimeout is zero:
	// the webhooks' --hook-body-timeout default.
	DefaultBodyTimeout = 30 * time.Second
	// maxSessions bounds the memory logins take; past it the session closest to expiry goes.
	maxSessions = 10_000
)

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
	// SessionTTL is how long a login lasts (DefaultSessionTTL when zero). Sessions are held in
	// this process: a restart logs everyone out.
	SessionTTL time.Duration
	// BodyTimeout bounds the time a request body may take to arrive, for every route behind
	// the guard (webhooks bound their own); DefaultBodyTimeout when zero.
	BodyTimeout time.Duration
	// Users are the stored users (FollowUsers), who log in with their own tokens; nil when
	// only the web token logs in.
	Users *Users
	// OIDC logs people in through an OpenID provider (DiscoverOIDC); nil without one.
	OIDC *OIDC
	// TokenFile is the file Token was read from, which the login page names so that whoever
	// runs the host knows where to look; "" names none.
	TokenFile string
}

// LoadOrCreateTokenFile reads the token at path, creating it first when it does not exist: 32
// random bytes as hex, in a file only its owner may read (its directory created 0700). With it,
// a serve without --http-token-file is still reachable only by whoever can read the file: the
// host's own user, not every local account that can connect to 127.0.0.1. It reports whether
// it created the file.
func LoadOrCreateTokenFile(path string) (token string, created bool, err error) {
	if _, err := os.Stat(path); err == nil {
		token, err := ReadTokenFile(path)
		return token, false, err
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", false, fmt.Errorf("read the web token %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", false, fmt.Errorf("create the web token's directory %s: %w", filepath.Dir(path), err)
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	token = hex.EncodeToString(b)
	// O_EXCL: two hosts starting at once must not each write a token and serve the other's.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		token, err := ReadTokenFile(path)
		return token, false, err
	}
	if err != nil {
		return "", false, fmt.Errorf("create the web token %s: %w", path, err)
	}
	if _, err := f.WriteString(token + "\n"); err != nil {
		f.Close()
		return "", false, fmt.Errorf("write the web token %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return "", false, fmt.Errorf("write the web token %s: %w", path, err)
	}
	return token, true, nil
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
	cfg  Config
	csrf *http.CrossOriginProtection
	log  *zap.Logger
	now  func() time.Time // the clock sessions expire by; a test's own in tests

	mu       sync.Mutex
	sessions map[string]*session // sha256 of each live session id → the session
	pending  map[string]*pendingLogin
}

// New returns a guard for cfg.
func New(cfg Config, log *zap.Logger) *Guard {
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = DefaultBodyTimeout
	}
	g := &Guard{cfg: cfg, log: log, csrf: http.NewCrossOriginProtection(), now: time.Now, sessions: map[string]*session{}, pending: map[string]*pendingLogin{}}
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
		if strings.HasPrefix(r.URL.Path, "/hooks/") {
			next.ServeHTTP(w, r) // webhooks bound their own body's time (--hook-body-timeout)
			return
		}
		g.boundBody(w, r)
		if r.URL.Path == StyleSheetPath && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			serveStyleSheet(w, r) // the look of the pages shown before a login: nothing secret
			return
		}
		switch {
		case g.cfg.Token == "":
			// Without a token only loopback serves; a page of another site that a DNS name
			// rebound to 127.0.0.1 must not reach it either. serve never runs so: it makes a
			// token at first start. This is for tests and embedders that guard otherwise.
			if !loopbackHost(r.Host) {
				g.refuse(w, r, http.StatusForbidden, fmt.Sprintf("Host %q is not a loopback name: without a token the web face answers only to localhost and loopback addresses", r.Host))
				return
			}
			if r.URL.Path == "/logout" && r.Method == http.MethodPost {
				http.Redirect(w, r, "/", http.StatusSeeOther) // no session to end
				return
			}
			next.ServeHTTP(w, withPrincipal(r, operator("loopback, no token"), "loopback, no token"))
			return
		case g.cfg.Loopback && (r.URL.Path == "/healthz" || r.URL.Path == "/metrics"):
			next.ServeHTTP(w, r)
			return
		case r.URL.Path == "/login":
			g.login(w, r)
			return
		case strings.HasPrefix(r.URL.Path, "/login/oidc"):
			g.oidcLogin(w, r)
			return
		case r.URL.Path == "/logout" && r.Method == http.MethodPost:
			g.logout(w, r)
			return
		}
		if r.Method == http.MethodGet && r.URL.Query().Has("token") {
			g.tokenLink(w, r)
			return
		}
		p, how, err := g.authorized(r)
		var ended *errEnded
		switch {
		case err == nil:
			next.ServeHTTP(w, withPrincipal(r, p, how))
		case errors.Is(err, errWrong):
			g.unauthorized(w, r, "wrong token")
		case errors.Is(err, errExpired):
			g.unauthorized(w, r, "the login has expired or was logged out: log in again at /login")
		case errors.As(err, &ended):
			g.unauthorized(w, r, ended.reason+": log in again at /login")
		default:
			g.unauthorized(w, r, msgMissing)
		}
	})
}

// boundBody gives a request's body BodyTimeout to arrive, so that a client sending headers and
// then stalling (POST /login, /run, a dashboard form) cannot hold a connection and a
// descriptor for ever. net/http lifts the deadline once the body has been read to its end (it
// then watches the connection for the client going away), so a long ?wait= or log stream after
// the body is not cut; TestStalledBodiesAreCutOff holds it to that.
func (g *Guard) boundBody(w http.ResponseWriter, r *http.Request) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return
	}
	if err := http.NewResponseController(w).SetReadDeadline(time.Now().Add(g.cfg.BodyTimeout)); err != nil {
		g.log.Debug("cannot bound the body's read time", zap.Error(err)) // not a net.Conn (tests)
	}
}

// IsBodyTimeout reports whether err is a body that did not arrive in time (boundBody), which
// a handler answers with 408.
func IsBodyTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

type whoKey struct{}

type principalKey struct{}

// withPrincipal hands next who the request is, and how it was authorized from where, for
// the log lines of what it does.
func withPrincipal(r *http.Request, p people.Principal, how string) *http.Request {
	who := how + " from " + r.RemoteAddr
	if p.User {
		who = p.Name + " via " + who
	}
	ctx := context.WithValue(r.Context(), whoKey{}, who)
	ctx = context.WithValue(ctx, principalKey{}, p)
	return r.WithContext(ctx)
}

// PrincipalOf is who the guard let r through as, and whether it guarded r at all. Handlers
// check every act against it (people.Principal.May): a button a page hides is not a check.
func PrincipalOf(r *http.Request) (people.Principal, bool) {
	p, ok := r.Context().Value(principalKey{}).(people.Principal)
	return p, ok
}

// Who names who made a request that the guard let through, for the log line of an action:
// the user, how it was authorized and from where ("ada via login session 1b9d0a4c from
// 10.0.0.5:51234"; for the web token, which is nobody's, only how: "bearer token from …");
// "" for a request it did not guard.
func Who(r *http.Request) string {
	s, _ := r.Context().Value(whoKey{}).(string)
	return s
}

var (
	errMissing = errors.New("missing")
	errWrong   = errors.New("wrong")
	errExpired = errors.New("expired")
)

// authorized checks the bearer header, else the login cookie, and says who the request is and
// how it was authorized: "bearer token", or "login session <tag>", the tag naming the session
// in the log lines of what it does without being any use to whoever reads them.
func (g *Guard) authorized(r *http.Request) (people.Principal, string, error) {
	if h := r.Header.Get("Authorization"); h != "" {
		token, ok := strings.CutPrefix(h, "Bearer ")
		if ok && g.tokenMatches(token) {
			return operator("bearer token"), "bearer token", nil
		}
		if u, found := g.cfg.Users.byToken(token); ok && found {
			return u.Principal(viaToken), "bearer token", nil
		}
		return people.Principal{}, "", errWrong
	}
	c, err := r.Cookie(cookieName(r))
	if err != nil {
		return people.Principal{}, "", errMissing
	}
	key, s, err := g.lookupSession(c.Value)
	if err != nil {
		return people.Principal{}, "", err
	}
	how := "login session " + key[:8]
	p, err := g.principal(s, how)
	if err != nil {
		g.endSession(key, err)
		return people.Principal{}, "", err
	}
	return p, how, nil
}

// byToken is the session a login with token makes: the web token's, or its user's; false when
// the token is nobody's.
func (g *Guard) byToken(token string) (session, bool) {
	if g.tokenMatches(token) {
		return session{}, true
	}
	if u, ok := g.cfg.Users.byToken(token); ok {
		return session{via: viaToken, user: u.Name, tokenHash: u.TokenHash}, true
	}
	return session{}, false
}

// tokenMatches compares in constant time, so the response time says nothing of how much of a
// guess was right.
func (g *Guard) tokenMatches(token string) bool {
	return subtle.ConstantTimeCompare([]byte(token), []byte(g.cfg.Token)) == 1
}

// tokenLink logs in from a link carrying ?token=: the token is exchanged for a session at
// once, and the browser sent on to the same URL without it, so the token does not stay in the
// address bar, the history or a Referer.
func (g *Guard) tokenLink(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	s, ok := g.byToken(q.Get("token"))
	if !ok {
		g.unauthorized(w, r, "wrong token")
		return
	}
	q.Del("token")
	u := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
	g.startSession(w, r, s, "token link")
	http.Redirect(w, r, safeNext(u.String()), http.StatusSeeOther)
}

//go:embed login.html
var loginHTML string

// StyleSheetPath is the sheet of the pages a person sees without a login (this login page,
// a signed link's page), served to anyone: the dashboard's own sheet is behind the guard, and
// the CSP takes no inline style.
const StyleSheetPath = "/login.css"

//go:embed login.css
var styleSheet []byte

func serveStyleSheet(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	w.Header().Set("Cache-Control", "max-age=300")
	http.ServeContent(w, r, "login.css", time.Time{}, bytes.NewReader(styleSheet))
}

var loginPage = template.Must(template.New("login").Parse(loginHTML))

type loginData struct {
	Next, Error string
	// TokenFile is where the host's token is (Config.TokenFile).
	TokenFile string
	// OIDC names the OpenID provider when people may log in through it: the page offers it.
	OIDC string
}

func (g *Guard) loginData(next, msg string) loginData {
	d := loginData{Next: next, Error: msg, TokenFile: g.cfg.TokenFile}
	if g.cfg.OIDC != nil {
		d.OIDC = g.cfg.OIDC.Name()
	}
	return d
}

func (g *Guard) login(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		g.renderLogin(w, http.StatusOK, g.loginData(safeNext(r.URL.Query().Get("next")), ""))
	case http.MethodPost:
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if err := r.ParseForm(); err != nil {
			if IsBodyTimeout(err) {
				w.Header().Set("Connection", "close")
				g.refuse(w, r, http.StatusRequestTimeout, fmt.Sprintf("the login form did not arrive within %s", g.cfg.BodyTimeout))
				return
			}
			g.renderLogin(w, http.StatusBadRequest, g.loginData("/", "the form could not be read: "+err.Error()))
			return
		}
		next := safeNext(r.PostForm.Get("next"))
		s, ok := g.byToken(r.PostForm.Get("token"))
		if !ok {
			g.log.Warn("web login refused: wrong token", zap.String("from", r.RemoteAddr))
			g.renderLogin(w, http.StatusUnauthorized, g.loginData(next, "Wrong token."))
			return
		}
		g.startSession(w, r, s, "login form")
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

// safeNext keeps a redirect after login on this host: a path of it, else "/". Browsers drop
// tabs and newlines from a Location and read a backslash as a slash, so "/\t/evil.example"
// and "/\\evil.example" are the network-path reference "//evil.example" to them; any control
// or space character, any backslash, and anything that parses with a scheme or a host is
// refused rather than cleaned.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.ContainsRune(next, '\\') ||
		strings.ContainsFunc(next, func(c rune) bool { return unicode.IsControl(c) || unicode.IsSpace(c) }) {
		return "/"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.Opaque != "" || !strings.HasPrefix(u.Path, "/") || strings.HasPrefix(u.Path, "//") {
		return "/"
	}
	return next
}

const msgMissing = "this needs the host's token or a user's: send Authorization: Bearer <token>, or log in at /login"

// unauthorized answers 401: a browser asking for a page gets the login form (so a bookmark
// of a page leads back to it), anything else a JSON error.
func (g *Guard) unauthorized(w http.ResponseWriter, r *http.Request, msg string) {
	g.log.Info("web request refused", zap.String("path", r.URL.Path), zap.String("from", r.RemoteAddr), zap.String("reason", msg))
	w.Header().Set("WWW-Authenticate", `Bearer realm="agent-host"`)
	if r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html") {
		page := "" // the form says what to do; a first visit is not an error
		if msg != msgMissing {
			page = "Log in again: " + strings.TrimSuffix(msg, ": log in again at /login") + "."
		}
		g.renderLogin(w, http.StatusUnauthorized, g.loginData(safeNext(r.URL.RequestURI()), page))
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
