package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/host/internal/testkit/oidctest"
)

// TestServeOIDCRefuses: an OpenID login that cannot work stops serve at start, naming the flag
// to fix: settings without --oidc-issuer, a missing secret, an issuer with no discovery document.
func TestServeOIDCRefuses(t *testing.T) {
	notOIDC := httptest.NewServer(http.NotFoundHandler())
	defer notOIDC.Close()
	cases := []struct {
		name  string
		args  func(e *exposureEnv, secret string) []string
		wants []string
	}{
		{"a role mapping without an issuer", func(e *exposureEnv, _ string) []string {
			return []string{"--oidc-role", "ops=approver"}
		}, []string{"give --oidc-issuer too"}},
		{"no client secret", func(e *exposureEnv, _ string) []string {
			return []string{"--oidc-issuer", notOIDC.URL, "--oidc-client-id", "host", "--oidc-default-role", "viewer"}
		}, []string{"--oidc-issuer needs --oidc-client-secret-file"}},
		{"an unknown role", func(e *exposureEnv, secret string) []string {
			return []string{"--oidc-issuer", notOIDC.URL, "--oidc-client-id", "host", "--oidc-client-secret-file", secret, "--oidc-role", "ops=boss"}
		}, []string{`--oidc-role "ops=boss"`, `unknown role "boss"`}},
		{"an issuer with no discovery document", func(e *exposureEnv, secret string) []string {
			return []string{"--oidc-issuer", notOIDC.URL, "--oidc-client-id", "host", "--oidc-client-secret-file", secret, "--oidc-role", "ops=approver"}
		}, []string{"--oidc-issuer " + notOIDC.URL, "/.well-known/openid-configuration) is not usable"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newExposureEnv(t, map[string]string{"hello.sh": "echo '\"hi\"'\n"})
			secret := filepath.Join(e.dir, "oidc.secret")
			os.WriteFile(secret, []byte("s3cret\n"), 0o600)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, hostBin, append(e.serveArgs("--nats-listen", freeAddr(t), "--http", freeAddr(t)), tc.args(e, secret)...)...)
			cmd.Env = e.env
			out, err := cmd.CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("serve started and kept serving instead of refusing:\n%s", out)
			}
			if err == nil {
				t.Fatalf("serve exited 0:\n%s", out)
			}
			for _, w := range tc.wants {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestServeOIDCLogin: serve with the --oidc-* flags reads a real provider's discovery document
// at start, offers it on the login page, and sends a browser to the provider's authorization
// endpoint with the callback under --public-url's default (http://<--http>), state, nonce and
// a PKCE challenge.
func TestServeOIDCLogin(t *testing.T) {
	e := newExposureEnv(t, map[string]string{"hello.sh": "echo '\"hi\"'\n"})
	addr := freeAddr(t)
	callback := "http://" + addr + "/login/oidc/callback"
	p := oidctest.Start(t, []string{callback})
	secret := filepath.Join(e.dir, "oidc.secret")
	if err := os.WriteFile(secret, []byte(p.ClientSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := startServe(t, e, nil, addr, "--nats-listen", freeAddr(t), "--oidc-issuer", p.Issuer, "--oidc-client-id", p.ClientID,
		"--oidc-client-secret-file", secret, "--oidc-role", "ops=approver", "--oidc-role", "eng=runner")
	if !strings.Contains(logs.String(), "OpenID login ready") {
		t.Errorf("serve did not log that the OpenID login is ready:\n%s", logs.String())
	}
	resp, err := http.Get("http://" + addr + "/login")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), "Log in with "+p.Issuer) {
		t.Fatalf("the login page does not offer the provider:\n%s", page)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err = noRedirect.Get("http://" + addr + "/login/oidc?next=/inbox")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	to, err := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusSeeOther || err != nil || !strings.HasPrefix(to.String(), p.Issuer+"/oauth2/auth?") {
		t.Fatalf("/login/oidc: %d to %q, want 303 to %s/oauth2/auth", resp.StatusCode, resp.Header.Get("Location"), p.Issuer)
	}
	q := to.Query()
	if q.Get("redirect_uri") != callback || q.Get("client_id") != p.ClientID || q.Get("code_challenge_method") != "S256" ||
		q.Get("code_challenge") == "" || q.Get("nonce") == "" || q.Get("state") == "" || !strings.Contains(q.Get("scope"), "openid") {
		t.Fatalf("the authorization request %v lacks the callback, client, PKCE, nonce, state or scope", q)
	}
	var state *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "agent_host_oidc" {
			state = c
		}
	}
	if state == nil || state.Value != q.Get("state") || !state.HttpOnly || state.SameSite != http.SameSiteLaxMode {
		t.Fatalf("state cookie %+v: want the state, HttpOnly, SameSite=Lax", state)
	}
}
