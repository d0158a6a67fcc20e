// Package oidctest runs a real OpenID provider for tests of web login: ORY Hydra (built by
// scripts/setup) on loopback ports with an in-memory store, and the login-and-consent app every
// Hydra deployment supplies, here a plain HTML form in the test process that checks the test's
// users. A relying party under test logs in through it exactly as it would through any OpenID
// provider: discovery, a browser filling the form, the code exchange, the ID token's signature.
package oidctest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/host/internal/testkit/toolbin"
)

// Version is the Hydra this package drives; its admin API and configuration keys are v2's.
const Version = "v2.3.0"

// InstallHint says how to get the binary.
const InstallHint = "run scripts/setup (it builds ORY Hydra " + Version + " into $(go env GOPATH)/bin/hydra)"

// Scopes are what the registered client may ask for; Scopes[0] makes it OpenID Connect.
var Scopes = []string{"openid", "profile", "email", "groups"}

// User is someone who can log in with the form: Name is both the login name and the ID token's
// subject and preferred_username.
type User struct {
	Name, Password, Email string
	Groups                []string
}

// Provider is a running Hydra with one registered client.
type Provider struct {
	// Issuer is the string to give the relying party (oidc.NewProvider, the host's issuer
	// setting): http://127.0.0.1:<port> with no trailing slash. go-oidc requires the discovery
	// document's issuer to equal it byte for byte, and Hydra publishes its configured issuer as is.
	Issuer string
	// ClientID and ClientSecret are the registered client's; it authenticates at the token
	// endpoint with client_secret_basic (x/oauth2's first guess).
	ClientID, ClientSecret string
	// AdminURL is Hydra's admin API, for a test that wants to look at sessions or clients.
	AdminURL string
	// LoginURL is the login form's address; Hydra sends browsers there with a login_challenge.
	LoginURL string
	// LogPath is Hydra's log; the test's log shows its tail when the test fails.
	LogPath string
}

// Binary finds a Hydra of Version: $PATH, then $(go env GOPATH)/bin, then ~/go/bin.
func Binary() (string, error) {
	candidates := toolbin.Candidates("hydra")
	var seen []string
	for _, p := range candidates {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		// Another Hydra may serve another admin API; only Version's is known to work here.
		out, _ := exec.Command(p, "version").Output()
		v := versionOf(string(out))
		if v == Version {
			return p, nil
		}
		seen = append(seen, fmt.Sprintf("%s (version %q)", p, v))
	}
	if len(seen) > 0 {
		return "", fmt.Errorf("no ORY Hydra %s: found only %s; %s", Version, strings.Join(seen, ", "), InstallHint)
	}
	return "", fmt.Errorf("no ORY Hydra in $PATH, $(go env GOPATH)/bin or ~/go/bin; %s", InstallHint)
}

// Start runs Hydra (serve all --dev, DSN=memory, issuer = its public URL) and the login app
// until the test ends, and registers one confidential client for redirectURIs (authorization
// code flow, scopes Scopes). Without the binary the test is skipped, loudly, or fails when
// OIDCTEST_REQUIRE is set (CI).
func Start(t testing.TB, redirectURIs []string, users ...User) *Provider {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		if os.Getenv("OIDCTEST_REQUIRE") != "" {
			t.Fatalf("OIDCTEST_REQUIRE is set but %v", err)
		}
		t.Skipf("\n\n*** SKIPPING OPENID CONNECT TESTS: %v ***\n\n", err)
	}
	app := newLoginApp(users)
	logPath := filepath.Join(t.TempDir(), "hydra.log")
	// A port picked by closing a listener can be taken again before Hydra binds it: try again.
	var last error
	for range 3 {
		p, stop, err := run(bin, app, logPath)
		if err != nil {
			last = err
			continue
		}
		t.Cleanup(func() {
			stop()
			if t.Failed() {
				t.Logf("hydra's log (%s), last lines:\n%s", logPath, tail(logPath, 60))
			}
		})
		p.ClientID, p.ClientSecret, err = p.NewClient(redirectURIs)
		if err != nil {
			t.Fatalf("%v", err)
		}
		return p
	}
	t.Fatalf("start hydra: %v\nlast lines of its log:\n%s", last, tail(logPath, 60))
	return nil
}

// run starts the login app and Hydra and waits until Hydra is ready; stop ends both.
func run(bin string, app *loginApp, logPath string) (*Provider, func(), error) {
	public, err := freePort()
	if err != nil {
		return nil, nil, fmt.Errorf("find a free port for hydra's public API: %w", err)
	}
	admin, err := freePort()
	if err != nil {
		return nil, nil, fmt.Errorf("find a free port for hydra's admin API: %w", err)
	}
	p := &Provider{Issuer: "http://" + public, AdminURL: "http://" + admin, LogPath: logPath}
	app.admin = p.AdminURL
	web := app.serve()
	p.LoginURL = web.URL + "/login"

	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		web.Close()
		return nil, nil, fmt.Errorf("open hydra's log: %w", err)
	}
	// --sqa-opt-out: no usage report to ORY from a test (the machine may have no internet).
	cmd := exec.Command(bin, "serve", "all", "--dev", "--sqa-opt-out")
	cmd.Env = hydraEnv(p, web.URL, public, admin)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		web.Close()
		log.Close()
		return nil, nil, fmt.Errorf("run %s: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); log.Close(); close(exited) }()
	stop := func() {
		cmd.Process.Kill()
		<-exited
		web.Close()
	}
	if err := waitReady(p, exited); err != nil {
		stop()
		return nil, nil, err
	}
	return p, stop, nil
}

// hydraEnv configures Hydra. Hydra reads every configuration key from the environment, so it
// gets only these: a DSN or SERVE_* of the tester's shell must not change the provider.
func hydraEnv(p *Provider, app, public, admin string) []string {
	_, publicPort, _ := net.SplitHostPort(public)
	_, adminPort, _ := net.SplitHostPort(admin)
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"DSN=memory",
		"SERVE_PUBLIC_HOST=127.0.0.1", "SERVE_PUBLIC_PORT=" + publicPort,
		"SERVE_ADMIN_HOST=127.0.0.1", "SERVE_ADMIN_PORT=" + adminPort,
		"URLS_SELF_ISSUER=" + p.Issuer,
		"URLS_LOGIN=" + app + "/login",
		"URLS_CONSENT=" + app + "/consent",
		"URLS_ERROR=" + app + "/error",
		"SECRETS_SYSTEM=" + randomHex(32),
		// The login app, Hydra and the relying party share the host 127.0.0.1, so one site:
		// Lax cookies reach Hydra on the redirects back to it, over plain http.
		"SERVE_COOKIES_SAME_SITE_MODE=Lax",
		// A failing test's log should say why Hydra refused a request.
		"OAUTH2_EXPOSE_INTERNAL_ERRORS=true",
		"LOG_LEAK_SENSITIVE_VALUES=true",
	}
}

// waitReady polls Hydra's readiness (its database migrated, both APIs serving), then asks once
// for its signing keys.
func waitReady(p *Provider, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	poll := &http.Client{Timeout: time.Second}
	for {
		if status(poll, p.AdminURL+"/health/ready") == http.StatusOK && status(poll, p.Issuer+"/health/ready") == http.StatusOK {
			break
		}
		select {
		case <-exited:
			return fmt.Errorf("hydra exited at start (see %s)", p.LogPath)
		case <-ctx.Done():
			return fmt.Errorf("hydra was not ready on %s and %s within a minute (see %s)", p.AdminURL, p.Issuer, p.LogPath)
		case <-time.After(25 * time.Millisecond):
		}
	}
	// Hydra makes its ID token key pair on the first request that needs it, which takes a
	// second, and two such requests at once make two and one fails with a 500: the relying
	// party's discovery must not be the first.
	jwks := p.Issuer + "/.well-known/jwks.json"
	if s := status(&http.Client{Timeout: 30 * time.Second}, jwks); s != http.StatusOK {
		return fmt.Errorf("hydra's %s answered %d, want 200 (see %s)", jwks, s, p.LogPath)
	}
	return nil
}

// status is the HTTP status of a GET of url, 0 when there is no answer.
func status(client *http.Client, url string) int {
	resp, err := client.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// versionOf reads `hydra version`'s "Version:    v2.3.0" line.
func versionOf(out string) string {
	for line := range strings.Lines(out) {
		if v, ok := strings.CutPrefix(line, "Version:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// tail is the last n lines of the file at path, or why it could not be read.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
