package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPayloadOverTheLimits: a user sends a 2 MB payload, with `host invoke` and with POST /run.
// Each refusal names the limit it hit and what to do (a volume; the NATS server's max_payload;
// serve --run-max-bytes for POST /run, not the webhooks' flag), and leaves no job behind.
func TestPayloadOverTheLimits(t *testing.T) {
	e := newExposureEnv(t, map[string]string{"echo.py": "def main(data: str = ''):\n    return len(data)\n"})
	const token = "0123456789abcdef0123456789abcdef"
	tokenFile := filepath.Join(e.dir, "http.token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	natsAddr, httpAddr := freeAddr(t), freeAddr(t)
	// POST /run takes up to 1.5 MB here: more than the NATS server's 1 MiB max_payload.
	startServe(t, e, nil, httpAddr, "--nats-listen", natsAddr, "--http-token-file", tokenFile, "--run-max-bytes", "1500000")
	url := "nats://" + natsAddr
	payload := func(n int) string { return `{"data":"` + strings.Repeat("a", n) + `"}` }
	file := filepath.Join(e.dir, "big.json")
	if err := os.WriteFile(file, []byte(payload(2_000_000)), 0o644); err != nil {
		t.Fatal(err)
	}

	_, stderr, code := run(t, "--nats", url, "invoke", "echo", "@"+file, "--wait")
	if code != 2 {
		t.Fatalf("invoke of 2 MB: exit %d, want 2 (not queued): %s", code, truncated(stderr))
	}
	for _, w := range []string{"payload for echo is 1.9 MiB (2000011 bytes)", "max_payload", "1020.0 KiB", "volume", "--nats-config"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("invoke's refusal lacks %q: %s", w, stderr)
		}
	}
	if strings.Contains(stderr, "hook-max-bytes") {
		t.Errorf("invoke's refusal names the webhooks' flag: %s", stderr)
	}

	post := func(body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", "http://"+httpAddr+"/run/echo", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return resp.StatusCode, b.String()
	}
	// Over POST /run's own limit: its flag, not the webhooks'.
	status, body := post(payload(2_000_000))
	if status != http.StatusRequestEntityTooLarge || !strings.Contains(body, "1500000-byte limit (serve --run-max-bytes)") || strings.Contains(body, "hook-max-bytes") {
		t.Errorf("POST /run of 2 MB: %d %s; want 413 naming --run-max-bytes", status, body)
	}
	// Within it, but over what NATS takes in a message: the server's max_payload.
	status, body = post(payload(1_200_000))
	if status != http.StatusRequestEntityTooLarge || !strings.Contains(body, "max_payload") || !strings.Contains(body, "volume") {
		t.Errorf("POST /run of 1.2 MB: %d %s; want 413 naming max_payload", status, body)
	}

	// Nothing was queued for any of them.
	out, stderr, code := run(t, "--nats", url, "jobs", "--function", "echo")
	if code != 0 || strings.Contains(out, "echo ") {
		t.Errorf("jobs of echo after three refusals: exit %d %q %q; want none", code, out, stderr)
	}
}
