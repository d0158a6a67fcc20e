package webauth

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"html/template"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/coreos/go-oidc/v3/oidc"
	"go.uber.org/zap"
	"golang.org/x/oauth2"

	"github.com/agenthost/host/internal/people"
)

// OpenID Connect login: the authorization code flow with state, nonce and PKCE (S256), through
// a maintained client (go-oidc, x/oauth2). The host keeps no token of the provider's: the ID
// token is verified once, at the callback, and the login is then a session like any other
// (SessionTTL long, ended by logging out), whose role comes from the provider's groups claim
// through the role mapping, or from a stored user of the same name, which wins.

const (
	// CallbackPath is where the provider sends the browser back: the redirect URL's path.
	CallbackPath = "/login/oidc/callback"
	// DefaultGroupsClaim is the ID token claim the groups are read from.
	DefaultGroupsClaim = "groups"
	// pendingTTL bounds how long a login may stay at the provider's form.
	pendingTTL = 10 * time.Minute
	// maxPending bounds the logins started and not come back; past it the oldest goes.
	maxPending = 1000
	// stateCookie carries the login's state to the callback, binding it to the browser that
	// started it; __Host- over TLS, as the session cookie.
	stateCookie       = "agent_host_oidc"
	secureStateCookie = "__Host-agent_host_oidc"
)

// OIDCConfig is how people log in through an OpenID provider (serve --oidc-*).
type OIDCConfig struct {
	// Issuer is the provider's issuer URL; its discovery document is read at start.
	Issuer       string
	ClientID     string
	ClientSecret string
	// RedirectURL is this host's callback as the provider knows it: <public URL>/login/oidc/callback.
	RedirectURL string
	// GroupsClaim names the claim holding the person's groups; DefaultGroupsClaim when "".
	GroupsClaim string
	// Roles maps a group to the role its members get; a person in several gets the highest.
	Roles map[string]people.Role
	// DefaultRole is the role of a person in none of Roles' groups; 0 refuses them.
	DefaultRole people.Role
	// Scopes are asked for besides openid; DefaultScopes when empty. Some providers (Dex,
	// Keycloak's default client) send the groups claim only when asked for scope "groups".
	Scopes []string
}

// DefaultScopes are the scopes asked for when OIDCConfig.Scopes is empty.
var DefaultScopes = []string{"profile", "email"}

// OIDC is a provider whose discovery document was read: what the guard logs people in with.
type OIDC struct {
	cfg      OIDCConfig
	oauth    oauth2.Config
	verifier *oidc.IDTokenVerifier
	client   *http.Client
	log      *zap.Logger
}

// pendingLogin is a login sent to the provider and not yet back.
type pendingLogin struct {
	nonce, verifier, next string
	expires               time.Time
}

// ParseOIDCRoles reads --oidc-role <group>=<role> values and --oidc-default-role (a role, or
// "none").
func ParseOIDCRoles(specs []string, defaultRole string) (map[string]people.Role, people.Role, error) {
	roles := map[string]people.Role{}
	for _, spec := range specs {
		group, role, ok := strings.Cut(spec, "=")
		group = strings.TrimSpace(group)
		if !ok || group == "" {
			return nil, 0, fmt.Errorf("--oidc-role %q: want <group>=<role>, e.g. ops=approver (roles: %s)", spec, strings.Join(people.Roles(), ", "))
		}
		r, err := people.ParseRole(role)
		if err != nil {
			return nil, 0, fmt.Errorf("--oidc-role %q: %w", spec, err)
		}
		if _, dup := roles[group]; dup {
			return nil, 0, fmt.Errorf("--oidc-role: group %q is mapped twice; give each group one role (a person in several groups gets the highest)", group)
		}
		roles[group] = r
	}
	if d := strings.TrimSpace(defaultRole); d == "" || d == "none" {
		return roles, 0, nil
	}
	def, err := people.ParseRole(defaultRole)
	if err != nil {
		return nil, 0, fmt.Errorf("--oidc-default-role: %w, or none", err)
	}
	return roles, def, nil
}

// check refuses a configuration that cannot work, naming the flag to fix.
func (c *OIDCConfig) check() error {
	if u, err := url.Parse(c.Issuer); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("--oidc-issuer %q: want the provider's issuer URL, e.g. https://accounts.example.com", c.Issuer)
	}
	if c.ClientID == "" {
		return errors.New("--oidc-issuer needs --oidc-client-id: the client this host is registered as at the provider")
	}
	if c.ClientSecret == "" {
		return errors.New("--oidc-issuer needs --oidc-client-secret-file: a file holding the client's secret")
	}
	u, err := url.Parse(c.RedirectURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Path != CallbackPath {
		return fmt.Errorf("OpenID redirect URL %q: want this host's public URL followed by %s (set --public-url, or --oidc-redirect-url), and register it at the provider", c.RedirectURL, CallbackPath)
	}
	if len(c.Roles) == 0 && c.DefaultRole == 0 {
		return errors.New("--oidc-issuer with neither --oidc-role nor --oidc-default-role: nobody could log in; map a group to a role (--oidc-role ops=approver) or give everyone one (--oidc-default-role viewer)")
	}
	if c.GroupsClaim == "" {
		c.GroupsClaim = DefaultGroupsClaim
	}
	if len(c.Scopes) == 0 {
		c.Scopes = DefaultScopes
	}
	return nil
}

// discoveryRetry is how often DiscoverOIDC asks again a provider that does not answer.
const discoveryRetry = 2 * time.Second

// DiscoverOIDC reads the provider's discovery document. A provider that does not answer is
// asked again, each failure logged, until ctx ends: a host started beside its provider waits
// for it (bound ctx, serve gives it 30 s). A provider that answers with no valid document, or
// never answers, fails the start naming --oidc-issuer: a host whose login cannot work should
// not look as if it were serving.
func DiscoverOIDC(ctx context.Context, cfg OIDCConfig, log *zap.Logger) (*OIDC, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	client := &http.Client{Timeout: 15 * time.Second}
	var p *oidc.Provider
	for {
		var err error
		p, err = oidc.NewProvider(oidc.ClientContext(ctx, client), cfg.Issuer)
		if err == nil {
			break
		}
		var unreachable *url.Error
		if !errors.As(err, &unreachable) {
			return nil, fmt.Errorf("--oidc-issuer %s: its discovery document (%s/.well-known/openid-configuration) is not usable: %w", cfg.Issuer, strings.TrimSuffix(cfg.Issuer, "/"), err)
		}
		log.Warn("the OpenID provider does not answer; asking again", zap.String("oidc_issuer", cfg.Issuer), zap.Error(err))
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("--oidc-issuer %s does not answer (%w): start the provider, or correct the URL", cfg.Issuer, err)
		case <-time.After(discoveryRetry):
		}
	}
	o := &OIDC{cfg: cfg, client: client, log: log,
		oauth: oauth2.Config{ClientID: cfg.ClientID, ClientSecret: cfg.ClientSecret, Endpoint: p.Endpoint(),
			RedirectURL: cfg.RedirectURL, Scopes: append([]string{oidc.ScopeOpenID}, slices.DeleteFunc(slices.Clone(cfg.Scopes), func(s string) bool { return s == oidc.ScopeOpenID })...)},
		verifier: p.Verifier(&oidc.Config{ClientID: cfg.ClientID}),
	}
	log.Info("OpenID login ready", zap.String("oidc_issuer", cfg.Issuer), zap.String("redirect_url", cfg.RedirectURL),
		zap.String("groups_claim", cfg.GroupsClaim), zap.Int("mapped_groups", len(cfg.Roles)), zap.Stringer("default_role", roleOrNone(cfg.DefaultRole)))
	return o, nil
}

type roleOrNone people.Role

func (r roleOrNone) String() string {
	if r == 0 {
		return "none"
	}
	return people.Role(r).String()
}

// Name is what the login page calls the provider.
func (o *OIDC) Name() string { return o.cfg.Issuer }

// oidcLogin serves /login/oidc (sends the browser to the provider) and its callback.
func (g *Guard) oidcLogin(w http.ResponseWriter, r *http.Request) {
	o := g.cfg.OIDC
	switch {
	case o == nil:
		g.refuse(w, r, http.StatusNotFound, "this host has no OpenID login (serve --oidc-issuer); log in with a token at /login")
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		w.Header().Set("Allow", "GET")
		g.refuse(w, r, http.StatusMethodNotAllowed, "GET "+r.URL.Path)
	case r.URL.Path == "/login/oidc":
		g.oidcStart(w, r, o)
	case r.URL.Path == CallbackPath:
		g.oidcCallback(w, r, o)
	default:
		g.refuse(w, r, http.StatusNotFound, "no page at "+r.URL.Path+": OpenID login starts at /login/oidc")
	}
}

// oidcStart sends the browser to the provider's login with a fresh state (kept in a cookie,
// so that only this browser can bring it back), nonce (in the ID token, so that a token made
// for another login is refused) and PKCE verifier (so that a code seen on its way back is no
// use without it). All three stay on the host.
func (g *Guard) oidcStart(w http.ResponseWriter, r *http.Request, o *OIDC) {
	state, nonce, verifier := randomID(), randomID(), oauth2.GenerateVerifier()
	now := g.now()
	g.mu.Lock()
	if len(g.pending) >= maxPending {
		g.prunePendingLocked(now)
	}
	g.pending[sessionKey(state)] = &pendingLogin{nonce: nonce, verifier: verifier, next: safeNext(r.URL.Query().Get("next")), expires: now.Add(pendingTTL)}
	g.mu.Unlock()
	http.SetCookie(w, stateCookieFor(r, state, int(pendingTTL/time.Second)))
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, o.oauth.AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier)), http.StatusSeeOther)
}

// stateCookieFor is the login's state cookie. SameSite=Lax, not Strict: the callback is a
// top-level navigation from the provider's site, on which a browser sends Lax cookies and
// withholds Strict ones. Lax is safe here: the cookie only binds the callback to this browser
// and is worth nothing once the callback used it.
func stateCookieFor(r *http.Request, value string, maxAge int) *http.Cookie {
	name := stateCookie
	if r.TLS != nil {
		name = secureStateCookie
	}
	return &http.Cookie{Name: name, Value: value, Path: "/", MaxAge: maxAge, HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil}
}

func (g *Guard) prunePendingLocked(now time.Time) {
	var oldest string
	for k, p := range g.pending {
		if !now.Before(p.expires) {
			delete(g.pending, k)
		} else if oldest == "" || p.expires.Before(g.pending[oldest].expires) {
			oldest = k
		}
	}
	if len(g.pending) >= maxPending {
		delete(g.pending, oldest)
	}
}

// takePending finds and forgets the login r's state names, if r comes from the browser that
// started it (the state cookie) within pendingTTL.
func (g *Guard) takePending(r *http.Request) (*pendingLogin, bool) {
	state := r.URL.Query().Get("state")
	c, err := r.Cookie(stateCookieFor(r, "", 0).Name)
	if err != nil || state == "" || !constantEqual(c.Value, state) {
		return nil, false
	}
	key := sessionKey(state)
	g.mu.Lock()
	defer g.mu.Unlock()
	p, ok := g.pending[key]
	delete(g.pending, key)
	return p, ok && g.now().Before(p.expires)
}

// oidcCallback ends a login: the browser is back from the provider with a code, which is
// exchanged (with the PKCE verifier) for an ID token, verified (signature, issuer, audience,
// expiry, the nonce), and made a session. The answer is a page of this host that moves on by
// itself, not a redirect: the session cookie is SameSite=Strict, and a redirect that ends a
// navigation begun on the provider's site would not carry it, while a navigation this page
// begins does.
func (g *Guard) oidcCallback(w http.ResponseWriter, r *http.Request, o *OIDC) {
	http.SetCookie(w, stateCookieFor(r, "", -1))
	pending, ok := g.takePending(r)
	if !ok {
		g.oidcRefused(w, r, http.StatusBadRequest, "the login through the OpenID provider did not come back to the browser that started it, or took over 10 minutes "+
			"(open the dashboard at the address of --public-url: the provider sends you back there)", "no matching state")
		return
	}
	q := r.URL.Query()
	if e := q.Get("error"); e != "" {
		g.oidcRefused(w, r, http.StatusUnauthorized, "the OpenID provider did not log you in: "+strings.TrimSpace(e+" "+q.Get("error_description")), e)
		return
	}
	ctx, cancel := context.WithTimeout(oidc.ClientContext(r.Context(), o.client), 30*time.Second)
	defer cancel()
	tok, err := o.oauth.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(pending.verifier))
	if err != nil {
		g.oidcRefused(w, r, http.StatusBadGateway, "the OpenID provider refused to exchange the login's code: "+err.Error(), "code exchange failed")
		return
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		g.oidcRefused(w, r, http.StatusBadGateway, "the OpenID provider sent no ID token (is scope openid allowed for client "+o.cfg.ClientID+"?)", "no id_token")
		return
	}
	idt, err := o.verifier.Verify(ctx, raw)
	if err == nil && !constantEqual(idt.Nonce, pending.nonce) {
		err = errors.New("its nonce is not this login's")
	}
	if err != nil {
		g.oidcRefused(w, r, http.StatusUnauthorized, "the ID token was refused: "+err.Error(), "id token refused")
		return
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		g.oidcRefused(w, r, http.StatusBadGateway, "the ID token's claims cannot be read: "+err.Error(), "bad claims")
		return
	}
	s, p, err := g.oidcSession(o, claims)
	if err != nil {
		g.oidcRefused(w, r, http.StatusForbidden, err.Error(), "no role")
		return
	}
	g.startSession(w, r, s, "OpenID login ("+o.cfg.Issuer+", subject "+idt.Subject+")")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_ = landingPage.Execute(w, landing{Next: pending.next, Name: p.Name, Role: p.Role.String()})
}

var landingPage = template.Must(template.New("landing").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="0;url={{.Next}}"><title>Logged in · agent host</title></head>
<body><main><p>Logged in as {{.Name}} ({{.Role}}). <a href="{{.Next}}">Continue</a></p></main></body></html>
`))

type landing struct{ Next, Name, Role string }

// oidcRefused shows the login page with why the OpenID login failed.
func (g *Guard) oidcRefused(w http.ResponseWriter, r *http.Request, status int, msg, reason string) {
	g.log.Warn("OpenID login refused", zap.String("from", r.RemoteAddr), zap.String("reason", reason), zap.String("detail", msg))
	g.renderLogin(w, status, g.loginData("/", msg))
}

// oidcSession is the session the provider's claims make. The name is preferred_username, else
// email. A stored user of that name wins: its role, groups and functions, whatever the claims
// say. Otherwise the groups claim maps to the highest role its groups have (OIDCConfig.Roles),
// else the default role; with neither the person is refused, told why.
func (g *Guard) oidcSession(o *OIDC, claims map[string]any) (session, people.Principal, error) {
	name, _ := claims["preferred_username"].(string)
	if name == "" {
		name, _ = claims["email"].(string)
	}
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 256 || strings.ContainsFunc(name, unicode.IsControl) {
		return session{}, people.Principal{}, errors.New("the ID token names nobody: it has neither preferred_username nor email (allow scope profile or email for this client at the provider)")
	}
	if u, ok := g.cfg.Users.byName(name); ok {
		return session{via: viaOIDC, user: name, stored: true}, u.Principal(viaOIDC), nil
	}
	groups := claimStrings(claims[o.cfg.GroupsClaim])
	role := o.cfg.DefaultRole
	for _, grp := range groups {
		role = max(role, o.cfg.Roles[grp])
	}
	if role == 0 {
		mapped := slices.Sorted(maps.Keys(o.cfg.Roles))
		return session{}, people.Principal{}, fmt.Errorf("%s is in none of the groups this host gives a role to (%s; the provider says %s: %q): ask an admin to add you to one of them, or to add you as a user (`host users add %s --role <role>`)",
			name, strings.Join(mapped, ", "), o.cfg.GroupsClaim, groups, name)
	}
	p := people.Principal{Name: name, User: true, Role: role, Groups: groups, Via: viaOIDC}
	return session{via: viaOIDC, user: name, claims: p}, p, nil
}

// claimStrings reads a claim that is a list of strings, or one string.
func claimStrings(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, e := range v {
			if s, ok := e.(string); ok && s != "" {
				out = append(out, s)
			}
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	return nil
}

func constantEqual(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }
