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
