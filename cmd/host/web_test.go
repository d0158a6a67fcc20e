package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeWebToken: with --http-token-file, POST /run needs the token (a header, or the
// cookie a ?token= link sets), while /healthz stays open on loopback for probes.
func TestServeWebToken(t *testing.T) {
	e := newExposureEnv(t, map[string]string{"hello.sh": "echo '\"hi\"'\n"})
	const token = "0123456789abcdef0123456789abcdef"
	tokenFile := filepath.Join(e.dir, "http.token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	startServe(t, e, nil, addr, "--nats-listen", freeAddr(t), "--http-token-file", tokenFile) // /healthz answered 200 without it
	base := "http://" + addr
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	run := func(hdr map[string]string) (int, string) {
		req, _ := http.NewRequest("POST", base+"/run/hello", strings.NewReader(`{}`))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if status, body := run(nil); status != http.StatusUnauthorized {
		t.Errorf("without the token: %d %s", status, body)
	}
	if status, body := run(map[string]string{"Authorization": "Bearer " + token[:31] + "0"}); status != http.StatusUnauthorized {
		t.Errorf("with a wrong token: %d %s", status, body)
	}
	if status, body := run(map[string]string{"Authorization": "Bearer " + token}); status != http.StatusAccepted || !strings.Contains(body, "job_id") {
		t.Errorf("with the token: %d %s", status, body)
	}

	// A browser without a login gets the login page, which names the file serve read the
	// token from (not the default path), and its sheet, which needs no login.
	req, _ := http.NewRequest("GET", base+"/jobs", nil)
	req.Header.Set("Accept", "text/html")
	page, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	html, _ := io.ReadAll(page.Body)
	page.Body.Close()
	if page.StatusCode != http.StatusUnauthorized || !strings.Contains(string(html), tokenFile) || strings.Contains(string(html), "~/.config/host/http.token") {
		t.Errorf("the login page (%d) does not name %s alone:\n%s", page.StatusCode, tokenFile, html)
	}
	css, err := noRedirect.Get(base + "/login.css")
	if err != nil {
		t.Fatal(err)
	}
	css.Body.Close()
	if css.StatusCode != http.StatusOK || !strings.HasPrefix(css.Header.Get("Content-Type"), "text/css") {
		t.Errorf("the login page's sheet without a login: %d %s", css.StatusCode, css.Header.Get("Content-Type"))
	}

	resp, err := noRedirect.Get(base + "/jobs?token=" + token)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/jobs" {
		t.Fatalf("a token link: %d to %q, want 303 to /jobs", resp.StatusCode, resp.Header.Get("Location"))
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		cookie = c
	}
	if cookie == nil || strings.Contains(cookie.Value, token) {
		t.Fatalf("the token link set cookie %v: want one, not holding the token", cookie)
	}
	if status, body := run(map[string]string{"Cookie": cookie.String(), "Sec-Fetch-Site": "same-origin"}); status != http.StatusAccepted {
		t.Errorf("with the login cookie: %d %s", status, body)
	}
	if status, body := run(map[string]string{"Cookie": cookie.String(), "Sec-Fetch-Site": "cross-site"}); status != http.StatusForbidden {
		t.Errorf("with the login cookie, cross-site: %d %s", status, body)
	}
}

// TestServeWithoutTokenFileMakesOne: without --http-token-file, any local account could run
// functions, read volumes and restore versions through 127.0.0.1. serve now makes a token at
// first start, in the config directory, readable by its own user only, and logs where it is
// (never the token itself); the web face wants it, and /healthz stays open for probes.
func TestServeWithoutTokenFileMakesOne(t *testing.T) {
	e := newExposureEnv(t, map[string]string{"hello.sh": "echo '\"hi\"'\n"})
	addr := freeAddr(t)
	logs := startServe(t, e, nil, addr, "--nats-listen", freeAddr(t))
	base := "http://" + addr

	tokenFile := filepath.Join(e.dir, "config", "host", "http.token")
	st, err := os.Stat(tokenFile)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file %s: %v, mode %v; want one made at first start, mode 0600", tokenFile, err, st.Mode().Perm())
	}
	b, _ := os.ReadFile(tokenFile)
	token := strings.TrimSpace(string(b))
	if !strings.Contains(logs.String(), tokenFile) || strings.Contains(logs.String(), token) {
		t.Errorf("the log should name %s and never hold the token:\n%s", tokenFile, logs.String())
	}
	run := func(hdr map[string]string) (int, string) {
		req, _ := http.NewRequest("POST", base+"/run/hello", strings.NewReader(`{}`))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if status, body := run(nil); status != http.StatusUnauthorized {
		t.Fatalf("POST /run without the token, as any local account: %d %s; want 401", status, body)
	}
	for _, page := range []string{"/", "/volumes", "/secrets"} {
		resp, err := http.Get(base + page)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %d, want 401", page, resp.StatusCode)
		}
	}
	if status, body := run(map[string]string{"Authorization": "Bearer " + token}); status != http.StatusAccepted {
		t.Fatalf("POST /run with the made token: %d %s", status, body)
	}
}
