package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/secrets"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// TestFullNATSDisk fills the disk of a host's embedded NATS store while a job runs, then frees
// it, with the same host process throughout: while the disk is full, /healthz says the store
// refuses writes and why, POST /run answers 507 with the store's reason and queues nothing, and
// the host takes no new work; once space is freed the host starts JetStream again by itself,
// /healthz is ok, the job that ran across the fill finishes and commits its volume, and new
// jobs run and commit: nothing accepted is lost and no restart is needed.
func TestFullNATSDisk(t *testing.T) {
	t.Parallel() // mostly waiting
	requireJail(t)
	dir := tempDir(t, "fullnats-")
	bin, err := os.Stat(hostBin)
	if err != nil {
		t.Fatal(err)
	}
	// Room for the host's copy of itself (the jail's init), its snapshots and a small store.
	mnt := filepath.Join(dir, "tmpfs")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dm,mode=0755", bin.Size()>>20+24), "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("SKIPPED LOUDLY: cannot mount a tmpfs here: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	fnDir, keyFile, tokenFile := filepath.Join(dir, "functions"), filepath.Join(dir, "keys", "secrets.key"), filepath.Join(dir, "http.token")
	if _, err := secrets.LoadKey(keyFile, true); err != nil {
		t.Fatal(err)
	}
	// The ledger appends to its volume: its entry count is how many of its runs committed.
	writeFile(t, filepath.Join(fnDir, "ledger.sh"), "# sandbox\n# volume: ledger vol\nsleep ${SLEEP:-0}\necho x >> vol/entries\nwc -l < vol/entries\n")
	writeFile(t, filepath.Join(fnDir, "hello.sh"), "# sandbox\necho '\"hi\"'\n")
	writeFile(t, filepath.Join(fnDir, "nap.sh"), "# sandbox\n# env: SLEEP=6\n# volume: ledger vol\nsleep 6\necho x >> vol/entries\nwc -l < vol/entries\n")
	natsPort := freePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", natsPort)
	h := startHost(t, dir, hostOpts{name: "embedded", fnDir: fnDir, keyFile: keyFile, dataDir: filepath.Join(mnt, "data"),
		extra: []string{"--nats-listen", fmt.Sprintf("127.0.0.1:%d", natsPort), "--http-token-file", tokenFile,
			// Streams with a size reserve it: these fit the small store.
			"--store-limit", "AGENT_LOGS=1Mi", "--store-limit", "AGENT_RESULTS=1Mi"}})
	e := newEnv(t, url)
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	post := func(path string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+h.http+path, bytes.NewReader([]byte("{}")))
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
		resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	healthz := func() (int, map[string]string) {
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + h.http + "/healthz")
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		var body map[string]string
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body
	}
	count := func(id string) string {
		t.Helper()
		rec, err := e.store().WaitFinal(e.ctx(3*time.Minute), id)
		if err != nil {
			t.Fatalf("job %s: %v", id, err)
		}
		if rec.Status != jobtype.Succeeded {
			t.Fatalf("job %s: %s after %d attempts: %s", id, rec.Status, rec.Attempts, rec.Error)
		}
		t.Logf("job %s: %s after %d attempts", id, rec.Status, rec.Attempts)
		return strings.Trim(strings.TrimSpace(string(rec.Result)), `"`)
	}

	if err := e.publish("agent.run.ledger", "ledger-1", nil); err != nil {
		t.Fatal(err)
	}
	if got := count("ledger-1"); got != "1" {
		t.Fatalf("ledger-1 counted %q entries, want 1", got)
	}
	// A job accepted before the disk fills, still running when it does.
	if err := e.publish("agent.run.nap", "nap-1", nil); err != nil {
		t.Fatal(err)
	}
	natstest.Poll(30*time.Second, func() bool {
		r, err := e.store().Get(e.ctx(5*time.Second), "nap-1")
		return err == nil && r.Status == jobtype.Running
	})

	filler := filepath.Join(mnt, "filler")
	fill(t, filler)
	filledAt := time.Now()
	// A raw JetStream publish on the full disk: the server does not store it, and says
	// nothing (it keeps the write error and answers no more, which is what the host reads).
	pctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	m := nats.NewMsg("agent.run.hello")
	m.Data = bytes.Repeat([]byte("x"), 512<<10)
	_, rawErr := e.js.PublishMsg(pctx, m)
	cancel()
	t.Logf("a raw JetStream publish of 512 KiB on the full disk: %v", rawErr)
	if rawErr == nil {
		t.Fatal("a 512 KiB trigger was stored on a full disk")
	}
	var health map[string]string
	if !natstest.Poll(60*time.Second, func() bool {
		code, body := healthz()
		health = body
		return code == http.StatusServiceUnavailable && body["status"] == "store refuses writes"
	}) {
		t.Fatalf("/healthz with the NATS disk full: %v; want 503, the store refusing writes", health)
	}
	t.Logf("/healthz %s after the disk filled: %v", time.Since(filledAt).Round(100*time.Millisecond), health)
	if !strings.Contains(health["reason"], "no space left on device") {
		t.Errorf("/healthz's reason %q does not say the disk is full", health["reason"])
	}
	if got := h.metric("host_store_refusing_writes"); got != 1 {
		t.Errorf("host_store_refusing_writes = %v while the store refuses writes, want 1", got)
	}
	code, body := post("/run/hello")
	t.Logf("POST /run/hello on the full disk: %d %s", code, body)
	if code != http.StatusInsufficientStorage || !strings.Contains(body, "refuses writes") || !strings.Contains(body, "free space") {
		t.Errorf("POST /run/hello on the full disk: %d %s; want 507 with the store's reason and what to do", code, body)
	}

	// Full for 20 s, as the red team had it.
	time.Sleep(20*time.Second - time.Since(filledAt))
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	freedAt := time.Now()
	if !natstest.Poll(60*time.Second, func() bool { code, _ := healthz(); return code == http.StatusOK }) {
		_, body := healthz()
		t.Fatalf("/healthz a minute after space was freed: %v; want ok without a restart", body)
	}
	t.Logf("/healthz ok %s after space was freed", time.Since(freedAt).Round(100*time.Millisecond))
	if got := h.metric("host_store_resumes_total"); got < 1 {
		t.Errorf("host_store_resumes_total = %v after the store came back, want at least 1", got)
	}
	if got := h.metric("host_store_refusing_writes"); got != 0 {
		t.Errorf("host_store_refusing_writes = %v after the store came back, want 0", got)
	}
	// The job that ran across the fill commits; so does the next.
	if got := count("nap-1"); got != "2" {
		t.Errorf("nap-1, running when the disk filled, counted %q entries, want 2", got)
	}
	if err := e.publish("agent.run.ledger", "ledger-2", nil); err != nil {
		t.Fatal(err)
	}
	if got := count("ledger-2"); got != "3" {
		t.Errorf("ledger-2 after space was freed counted %q entries, want 3", got)
	}
	code, body = post("/run/hello?wait=60s")
	if code != http.StatusOK || !strings.Contains(body, "hi") {
		t.Errorf("POST /run/hello after space was freed: %d %s", code, body)
	}
	// Nothing refused was half-queued: every record is of a job that ran.
	for _, r := range e.records() {
		if r.Status != jobtype.Succeeded {
			t.Errorf("job %s of %s is %s (%s): a refused call left a record, or an accepted one was lost", r.ID, r.Function, r.Status, r.Error)
		}
	}
	if strings.Count(h.logText(), "==== embedded start") != 1 || !h.running() {
		t.Error("the host was restarted")
	}
}
