package oidctest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"time"
)

// What a browser test finds on the login form (CSS selectors).
const (
	UsernameSelector = "#username"
	PasswordSelector = "#password"
	SubmitSelector   = "#login"
	// ErrorSelector shows why the last attempt failed ("wrong username or password").
	ErrorSelector = "#error"
)

// WrongCredentials is the form's message after a wrong name or password.
const WrongCredentials = "Wrong username or password."

// loginApp is the login-and-consent app Hydra sends browsers to: Hydra knows no users, it asks
// this app who is logging in and what the ID token says about them, through its admin API.
type loginApp struct {
	users map[string]User
	admin string // Hydra's admin API, set before the app serves
}

func newLoginApp(users []User) *loginApp {
	a := &loginApp{users: map[string]User{}}
	for _, u := range users {
		a.users[u.Name] = u
	}
	return a
}

// serve starts the app on a loopback port.
func (a *loginApp) serve() *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /login", a.showLogin)
	mux.HandleFunc("POST /login", a.submitLogin)
	mux.HandleFunc("GET /consent", a.consent)
	mux.HandleFunc("GET /error", showError)
	return httptest.NewServer(mux)
}

var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>Log in</title></head>
<body>
<h1>Log in</h1>
{{if .Error}}<p id="error" role="alert">{{.Error}}</p>{{end}}
<form method="post" action="/login">
<input type="hidden" name="login_challenge" value="{{.Challenge}}">
<label>Username <input id="username" name="username" autocomplete="username" value="{{.Username}}" required></label>
<label>Password <input id="password" name="password" type="password" autocomplete="current-password" required></label>
<button id="login" type="submit">Log in</button>
</form>
</body></html>
`))

type loginForm struct{ Challenge, Username, Error string }

// showLogin shows the form, unless Hydra already knows the browser's user (skip), in which case
// Hydra requires the login to be accepted without asking.
func (a *loginApp) showLogin(w http.ResponseWriter, r *http.Request) {
	challenge := r.URL.Query().Get("login_challenge")
	var req struct {
		Skip    bool   `json:"skip"`
		Subject string `json:"subject"`
	}
	if err := a.call("GET", "/admin/oauth2/auth/requests/login", "login_challenge", challenge, nil, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if req.Skip {
		a.acceptLogin(w, r, challenge, req.Subject)
		return
	}
	render(w, http.StatusOK, loginForm{Challenge: challenge})
}

// submitLogin checks the form's credentials; a wrong pair shows the form again, with no code.
// The form needs no CSRF token of its own: Hydra binds the login to the browser that began it
// with its own CSRF cookie, which it checks when the browser comes back with the verifier.
func (a *loginApp) submitLogin(w http.ResponseWriter, r *http.Request) {
	challenge, name := r.PostFormValue("login_challenge"), r.PostFormValue("username")
	u, ok := a.users[name]
	if !ok || u.Password != r.PostFormValue("password") {
		render(w, http.StatusUnauthorized, loginForm{Challenge: challenge, Username: name, Error: WrongCredentials})
		return
	}
	a.acceptLogin(w, r, challenge, u.Name)
}

func (a *loginApp) acceptLogin(w http.ResponseWriter, r *http.Request, challenge, subject string) {
	body := map[string]any{"subject": subject, "remember": false, "amr": []string{"pwd"}}
	var done struct {
		RedirectTo string `json:"redirect_to"`
	}
	if err := a.call("PUT", "/admin/oauth2/auth/requests/login/accept", "login_challenge", challenge, body, &done); err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	http.Redirect(w, r, done.RedirectTo, http.StatusFound)
}

// consent grants what the client asked for, without a page (the test's users always agree), and
// puts the user's profile into the ID token.
func (a *loginApp) consent(w http.ResponseWriter, r *http.Request) {
	challenge := r.URL.Query().Get("consent_challenge")
	var req struct {
		Subject  string   `json:"subject"`
		Scope    []string `json:"requested_scope"`
		Audience []string `json:"requested_access_token_audience"`
	}
	if err := a.call("GET", "/admin/oauth2/auth/requests/consent", "consent_challenge", challenge, nil, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	u, ok := a.users[req.Subject]
	if !ok {
		http.Error(w, fmt.Sprintf("consent for %q, who is not among the test's users", req.Subject), http.StatusBadRequest)
		return
	}
	groups := u.Groups
	if groups == nil {
		groups = []string{} // a JSON array, never null, as a provider's groups claim is
	}
	body := map[string]any{
		"grant_scope":                 req.Scope,
		"grant_access_token_audience": req.Audience,
		"session": map[string]any{"id_token": map[string]any{
			"email": u.Email, "email_verified": true, "name": u.Name,
			"preferred_username": u.Name, "groups": groups,
		}},
	}
	var done struct {
		RedirectTo string `json:"redirect_to"`
	}
	if err := a.call("PUT", "/admin/oauth2/auth/requests/consent/accept", "consent_challenge", challenge, body, &done); err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	http.Redirect(w, r, done.RedirectTo, http.StatusFound)
}

// showError is where Hydra sends a browser when the flow fails (URLS_ERROR), so that a browser
// test's failure shows Hydra's reason.
func showError(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusBadRequest)
	fmt.Fprintf(w, "OpenID provider error: %s: %s %s\n", q.Get("error"), q.Get("error_description"), q.Get("error_hint"))
}

func render(w http.ResponseWriter, status int, f loginForm) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	loginPage.Execute(w, f)
}

// call sends one request to Hydra's admin API about a login or consent challenge.
func (a *loginApp) call(method, path, param, challenge string, in, out any) error {
	return adminCall(a.admin, method, path+"?"+param+"="+url.QueryEscape(challenge), in, out)
}

// adminClient bounds a call so that a Hydra that stopped answering fails the test rather than
// hanging it; a call to a live one takes milliseconds.
var adminClient = &http.Client{Timeout: 30 * time.Second}

// adminCall sends in as JSON to Hydra's admin API and decodes the answer into out.
func adminCall(admin, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, admin+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := adminClient.Do(req)
	if err != nil {
		return fmt.Errorf("hydra admin API %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("hydra admin API %s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(b)))
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("hydra admin API %s %s: decode %q: %w", method, path, b, err)
	}
	return nil
}

// NewClient registers another confidential client for redirectURIs (authorization code flow,
// client_secret_basic, scopes Scopes) and returns its ID and secret.
func (p *Provider) NewClient(redirectURIs []string) (id, secret string, err error) {
	secret = randomHex(16)
	in := map[string]any{
		"client_name":                "oidctest",
		"client_secret":              secret,
		"grant_types":                []string{"authorization_code"},
		"response_types":             []string{"code"},
		"scope":                      strings.Join(Scopes, " "),
		"redirect_uris":              redirectURIs,
		"token_endpoint_auth_method": "client_secret_basic",
	}
	var out struct {
		ID string `json:"client_id"`
	}
	if err := adminCall(p.AdminURL, "POST", "/admin/clients", in, &out); err != nil {
		return "", "", fmt.Errorf("register an OAuth2 client for %v: %w", redirectURIs, err)
	}
	return out.ID, secret, nil
}
