package oidctest_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/agenthost/host/internal/testkit/oidctest"
)

var alice = oidctest.User{Name: "alice", Password: "wonderland", Email: "alice@example.test", Groups: []string{"admins", "dev"}}

// claims is what the relying party reads from a verified ID token.
type claims struct {
	Subject           string   `json:"sub"`
	Email             string   `json:"email"`
	Name              string   `json:"name"`
	PreferredUsername string   `json:"preferred_username"`
	Groups            []string `json:"groups"`
}

// relyingParty is the smallest web app logging in with OpenID Connect as the host will: go-oidc
// for discovery and the ID token's checks, x/oauth2 for the code flow.
type relyingParty struct {
	t        testing.TB
	srv      *httptest.Server
	config   oauth2.Config
	verifier *oidc.IDTokenVerifier

	mu        sync.Mutex
	nonces    map[string]string // state -> nonce of each login begun
	callbacks int               // every request to /callback, with or without a code
	loggedIn  []claims
}

// newRelyingParty serves the app, starts the provider with the app's callback registered, and
// discovers the provider from the issuer string as a real relying party would.
func newRelyingParty(t testing.TB, users ...oidctest.User) (*relyingParty, *oidctest.Provider) {
	rp := &relyingParty{t: t, nonces: map[string]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /login", rp.login)
	mux.HandleFunc("GET /callback", rp.callback)
	rp.srv = httptest.NewServer(mux)
	t.Cleanup(rp.srv.Close)

	p := oidctest.Start(t, []string{rp.srv.URL + "/callback"}, users...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	provider, err := oidc.NewProvider(ctx, p.Issuer)
	if err != nil {
		t.Fatalf("discover the provider at %s: %v", p.Issuer, err)
	}
	rp.config = oauth2.Config{
		ClientID: p.ClientID, ClientSecret: p.ClientSecret, Endpoint: provider.Endpoint(),
		RedirectURL: rp.srv.URL + "/callback", Scopes: oidctest.Scopes,
	}
	rp.verifier = provider.Verifier(&oidc.Config{ClientID: p.ClientID})
	return rp, p
}

func (rp *relyingParty) login(w http.ResponseWriter, r *http.Request) {
	state, nonce := random(), random()
	rp.mu.Lock()
	rp.nonces[state] = nonce
	rp.mu.Unlock()
	http.Redirect(w, r, rp.config.AuthCodeURL(state, oidc.Nonce(nonce)), http.StatusFound)
}

func (rp *relyingParty) callback(w http.ResponseWriter, r *http.Request) {
	rp.mu.Lock()
	rp.callbacks++
	nonce, ok := rp.nonces[r.URL.Query().Get("state")]
	rp.mu.Unlock()
	c, err := rp.finish(r, nonce, ok)
	if err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	rp.mu.Lock()
	rp.loggedIn = append(rp.loggedIn, c)
	rp.mu.Unlock()
	fmt.Fprintf(w, `<!doctype html><p id="welcome">Welcome, %s</p>`, html.EscapeString(c.PreferredUsername))
}

// finish exchanges the code and checks the ID token: signature, issuer, audience, expiry, nonce.
func (rp *relyingParty) finish(r *http.Request, nonce string, stateKnown bool) (claims, error) {
	var c claims
	if !stateKnown {
		return c, fmt.Errorf("unknown state %q", r.URL.Query().Get("state"))
	}
	if e := r.URL.Query().Get("error"); e != "" {
		return c, fmt.Errorf("the provider refused: %s: %s", e, r.URL.Query().Get("error_description"))
	}
	tok, err := rp.config.Exchange(r.Context(), r.URL.Query().Get("code"))
	if err != nil {
		return c, fmt.Errorf("exchange the code: %w", err)
	}
	raw, ok := tok.Extra("id_token").(string)
	if !ok {
		return c, fmt.Errorf("the token response has no id_token")
	}
	idt, err := rp.verifier.Verify(r.Context(), raw)
	if err != nil {
		return c, fmt.Errorf("verify the ID token: %w", err)
	}
	if idt.Nonce != nonce {
		return c, fmt.Errorf("ID token nonce %q, want %q", idt.Nonce, nonce)
	}
	if err := idt.Claims(&c); err != nil {
		return c, fmt.Errorf("read the ID token's claims: %w", err)
	}
	return c, nil
}

func (rp *relyingParty) seen() (callbacks int, loggedIn []claims) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return rp.callbacks, slices.Clone(rp.loggedIn)
}

// TestDiscovery: the issuer string is the one go-oidc accepts, and the client is registered;
// this runs without a browser.
func TestDiscovery(t *testing.T) {
	_, p := newRelyingParty(t, alice)
	if strings.HasSuffix(p.Issuer, "/") || !strings.HasPrefix(p.Issuer, "http://127.0.0.1:") {
		t.Errorf("issuer %q: want http://127.0.0.1:<port> without a trailing slash", p.Issuer)
	}
	if p.ClientID == "" || p.ClientSecret == "" {
		t.Errorf("client id %q, secret %q: want both", p.ClientID, p.ClientSecret)
	}
}

// TestBrowserLogin: Chromium follows the relying party to the provider, fills the login form and
// comes back with a code; the relying party's verified ID token names the user.
func TestBrowserLogin(t *testing.T) {
	rp, _ := newRelyingParty(t, alice, oidctest.User{Name: "bob", Password: "builder", Email: "bob@example.test"})
	b := newBrowser(t)
	b.do("open the login form", chromedp.Navigate(rp.srv.URL+"/login"), chromedp.WaitVisible(oidctest.UsernameSelector))
	b.fill(alice.Name, alice.Password)
	b.do("come back logged in", chromedp.WaitVisible(`#welcome`))

	_, got := rp.seen()
	if len(got) != 1 {
		t.Fatalf("logins %+v, want one", got)
	}
	c := got[0]
	t.Logf("the relying party's verified ID token: %+v", c)
	if c.Subject != alice.Name || c.PreferredUsername != alice.Name || c.Name != alice.Name || c.Email != alice.Email ||
		!slices.Equal(c.Groups, alice.Groups) {
		t.Errorf("ID token claims %+v, want sub, name and preferred_username %q, email %q, groups %q",
			c, alice.Name, alice.Email, alice.Groups)
	}
}

// TestBrowserWrongPassword: a wrong password shows the form again with an error and issues no
// code; the right password on that same form then logs in.
func TestBrowserWrongPassword(t *testing.T) {
	rp, p := newRelyingParty(t, alice)
	b := newBrowser(t)
	b.do("open the login form", chromedp.Navigate(rp.srv.URL+"/login"), chromedp.WaitVisible(oidctest.UsernameSelector))
	b.fill(alice.Name, "not-"+alice.Password)
	b.do("see the error", chromedp.WaitVisible(oidctest.ErrorSelector))
	if msg := b.text("read the error", oidctest.ErrorSelector); msg != oidctest.WrongCredentials {
		t.Errorf("error %q, want %q", msg, oidctest.WrongCredentials)
	}
	if where := b.location(); !strings.HasPrefix(where, strings.TrimSuffix(p.LoginURL, "/login")) {
		t.Errorf("after a wrong password the browser is at %s, want the login app %s", where, p.LoginURL)
	}
	if n, got := rp.seen(); n != 0 || len(got) != 0 {
		t.Fatalf("after a wrong password the relying party saw %d callbacks and logins %+v, want none", n, got)
	}

	b.fill("", alice.Password) // the form keeps the username
	b.do("come back logged in", chromedp.WaitVisible(`#welcome`))
	if n, got := rp.seen(); n != 1 || len(got) != 1 || got[0].PreferredUsername != alice.Name {
		t.Errorf("after the right password: %d callbacks, logins %+v; want one, of %s", n, got, alice.Name)
	}
}

func random() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// browser is a headless Chromium, started as internal/dashboard's browser tests start it.
type browser struct {
	t   testing.TB
	ctx context.Context
}

func newBrowser(t testing.TB) *browser {
	t.Helper()
	chrome := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			chrome = p
			break
		}
	}
	if chrome == "" {
		t.Skip("SKIPPED LOUDLY: no Chromium for the OpenID login browser tests; install it with `apt-get install -y chromium` (scripts/setup does)")
	}
	// --no-sandbox: Chromium refuses to run as root (CI, this machine) with its sandbox on.
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	// The first run starts the browser, which lives as long as that run's context: no timeout.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium %s: %v", chrome, err)
	}
	return &browser{t: t, ctx: ctx}
}

// fill types into the login form's empty fields and submits it; an empty name leaves the name
// field as the form filled it (it keeps the name after a wrong password, never the password).
func (b *browser) fill(name, password string) {
	b.t.Helper()
	steps := []chromedp.Action[chromedp.Void]{chromedp.WaitVisible(oidctest.PasswordSelector)}
	if name != "" {
		steps = append(steps, chromedp.SendKeys(oidctest.UsernameSelector, name))
	}
	steps = append(steps, chromedp.SendKeys(oidctest.PasswordSelector, password), chromedp.Click(oidctest.SubmitSelector))
	b.do("fill in and submit the login form", steps...)
}

// actionBound only keeps a broken test from hanging; nothing here is timed.
const actionBound = time.Minute

func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, actionBound)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v\n%s", what, err, b.describe())
	}
}

func (b *browser) text(what, sel string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, actionBound)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(sel))
	if err != nil {
		b.t.Fatalf("%s: %v\n%s", what, err, b.describe())
	}
	return s
}

func (b *browser) location() string {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	where, _ := chromedp.Run(ctx, chromedp.Location())
	return where
}

// describe says where the browser is and what it shows, for a failure's message.
func (b *browser) describe() string {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	return "the browser is at " + b.location() + ", showing:\n" + text
}
