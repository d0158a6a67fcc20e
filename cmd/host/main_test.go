package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/host/internal/testkit/testwait"
	"github.com/nats-io/nats.go"
)

// hostBin is the binary under test, built once.
var hostBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "host-bin-")
	if err != nil {
		panic(err)
	}
	hostBin = filepath.Join(dir, "host")
	if out, err := exec.Command("go", "build", "-o", hostBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build host: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// run runs the host binary and returns its stdout, stderr and exit code.
func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return runIn(t, nil, args...)
}

// runIn is run with env added to the test's environment.
func runIn(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, hostBin, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("run host %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return stdout.String(), stderr.String(), code
}

// TestServeExamplesAsAUserWould starts `host serve` on the repository's own functions/ and
// drives it with a plain NATS client and the host's CLI, as the README says.
func TestServeExamplesAsAUserWould(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("SKIPPED LOUDLY: bubblewrap (bwrap) is not installed; .ci/run installs it")
	}
	if _, err := exec.LookPath("bun"); err != nil {
		t.Skip("SKIPPED LOUDLY: bun is not installed; .ci/run installs it (npm install -g bun@1.4.4)")
	}
	data, err := os.MkdirTemp("", "host-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(data)
	os.Chmod(data, 0o755)
	natsAddr, httpAddr := freeAddr(t), freeAddr(t)
	natsURL := "nats://" + natsAddr
	var logs bytes.Buffer
	keyFile := filepath.Join(data, "secrets.key")
	serve := exec.Command(hostBin, "serve", "--functions", "../../functions", "--data", filepath.Join(data, "data"),
		"--nats-listen", natsAddr, "--http", httpAddr, "--secrets-key-file", keyFile, "--http-token-file", filepath.Join(data, "http.token"))
	serve.Stdout, serve.Stderr = &logs, &logs
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- serve.Wait() }()
	defer func() {
		if serve.ProcessState == nil {
			serve.Process.Kill()
		}
		if t.Failed() {
			t.Logf("host logs:\n%s", logs.String())
		}
	}()

	testwait.For(t, "the host to be healthy", 60*time.Second, func() error { return healthz(httpAddr) })

	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	// nats req agent.call.hello '{"name":"Ada"}'
	reply, err := nc.Request("agent.call.hello", []byte(`{"name":"Ada"}`), time.Minute)
	if err != nil || string(reply.Data) != `{"greeting":"Hello, Ada!"}` {
		t.Fatalf("call hello: %v %s", err, replyData(reply))
	}

	// nats sub 'agent.result.>' while `nats pub agent.run.step1 '{"n":1}'`
	results := make(chan *nats.Msg, 16)
	sub, err := nc.ChanSubscribe("agent.result.>", results)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	nc.Flush()
	if err := nc.Publish("agent.run.step1", []byte(`{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	got := map[string]*nats.Msg{}
	for len(got) < 2 {
		select {
		case m := <-results:
			got[m.Subject] = m
		case <-time.After(time.Minute):
			t.Fatalf("chain results: got %v", got)
		}
	}
	s1, s2 := got["agent.result.step1"], got["agent.result.step2"]
	if string(s1.Data) != `{"n":2,"doubled":2}` || string(s2.Data) != `{"n":20,"from":"step2"}` {
		t.Fatalf("chain: %s then %s", s1.Data, s2.Data)
	}
	if s1.Header.Get("Job-Id") == "" || s2.Header.Get("Flow-Id") != s1.Header.Get("Job-Id") {
		t.Fatalf("chain headers: %v then %v", s1.Header, s2.Header)
	}

	// The CLI.
	out, errOut, code := run(t, "--nats", natsURL, "invoke", "hello", `{"name":"Ada"}`, "--wait")
	if code != 0 || strings.TrimSpace(out) != `{"greeting":"Hello, Ada!"}` {
		t.Fatalf("invoke --wait: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, errOut, code = run(t, "--nats", natsURL, "invoke", "wordcount", `{"text":"to be or not to be"}`, "--wait")
	if code != 0 || !strings.Contains(out, `{"word":"be","count":2}`) || !strings.Contains(errOut, "counted 4 distinct words") {
		t.Fatalf("invoke wordcount --wait: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	step1ID := s1.Header.Get("Job-Id")
	out, _, code = run(t, "--nats", natsURL, "logs", step1ID)
	if code != 0 || strings.TrimSpace(out) != "step1 got n=1" {
		t.Fatalf("logs: code %d, %q", code, out)
	}
	out, _, code = run(t, "--nats", natsURL, "job", step1ID)
	var rec map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &rec) != nil || rec["status"] != "succeeded" || rec["function"] != "step1" {
		t.Fatalf("job: code %d, %s", code, out)
	}
	out, _, code = run(t, "--nats", natsURL, "jobs", "--function", "step2")
	if code != 0 || !strings.Contains(out, s2.Header.Get("Job-Id")) || !strings.Contains(out, "succeeded") {
		t.Fatalf("jobs: code %d, %s", code, out)
	}
	_, errOut, code = run(t, "--nats", natsURL, "invoke", "hello", `{"name":`)
	if code == 0 || !strings.Contains(errOut, "not valid JSON") {
		t.Fatalf("invoke with bad JSON: code %d, %s", code, errOut)
	}
	_, errOut, code = run(t, "--nats", natsURL, "invoke", "nosuch", `{}`, "--wait")
	if code == 0 || !strings.Contains(errOut, "no host serves this function") {
		t.Fatalf("invoke unknown: code %d, %s", code, errOut)
	}

	// Volumes: the seed's Python agent remembers, and the CLI shows its memory and versions.
	for _, prompt := range []string{"first", "second"} {
		if _, errOut, code := run(t, "--nats", natsURL, "invoke", "agent", `{"prompt":"`+prompt+`"}`, "--wait"); code != 0 {
			t.Fatalf("invoke agent: %s", errOut)
		}
	}
	out, _, code = run(t, "--nats", natsURL, "volumes", "ls")
	if code != 0 || !strings.Contains(out, "agent-memory") {
		t.Fatalf("volumes ls: code %d, %q", code, out)
	}
	out, _, code = run(t, "--nats", natsURL, "volumes", "get", "agent-memory", "history.json")
	if code != 0 || out != `[{"role": "user", "content": "first"}, {"role": "user", "content": "second"}]` {
		t.Fatalf("volumes get: code %d, %q", code, out)
	}
	out, _, code = run(t, "--nats", natsURL, "volumes", "history", "agent-memory")
	if code != 0 || strings.Count(out, "\n") != 3 { // a header and two versions
		t.Fatalf("volumes history: code %d, %q", code, out)
	}
	if _, errOut, code := run(t, "--nats", natsURL, "volumes", "restore", "agent-memory", "1"); code != 0 {
		t.Fatalf("volumes restore: %s", errOut)
	}
	out, _, _ = run(t, "--nats", natsURL, "volumes", "get", "agent-memory", "history.json")
	if out != `[{"role": "user", "content": "first"}]` {
		t.Fatalf("after restoring version 1: %q", out)
	}
	if _, errOut, code := run(t, "--nats", natsURL, "volumes", "rm", "agent-memory", "--yes"); code != 0 {
		t.Fatalf("volumes rm: %s", errOut)
	}
	if out, _, _ = run(t, "--nats", natsURL, "volumes", "ls"); strings.Contains(out, "agent-memory") {
		t.Fatalf("volumes ls after rm: %q", out)
	}

	// Secrets: stored once, resolved at run time, never shown.
	_, errOut, code = run(t, "--nats", natsURL, "secrets", "set", "who", `"Ada Lovelace"`, "--secrets-key-file", keyFile)
	if code != 0 {
		t.Fatalf("secrets set: %s", errOut)
	}
	out, _, code = run(t, "--nats", natsURL, "secrets", "ls")
	if code != 0 || strings.TrimSpace(out) != "who" {
		t.Fatalf("secrets ls: %q", out)
	}
	// hello does not declare the secret, so a caller cannot hand it over (its resolution and
	// redaction are tested in internal/host, with functions that declare what they use).
	reply, err = nc.Request("agent.call.hello", []byte(`{"name":"$secret:who"}`), time.Minute)
	if err != nil || !strings.Contains(string(reply.Data), `secret \"who\" is not declared by function \"hello\"`) ||
		strings.Contains(string(reply.Data), "Ada Lovelace") {
		t.Fatalf("call with an undeclared secret: %v %s", err, replyData(reply))
	}
	if _, _, code = run(t, "--nats", natsURL, "secrets", "rm", "who"); code != 0 {
		t.Fatal("secrets rm failed")
	}
	// Too short to redact: refused, saying why, and not stored.
	if _, errOut, code = run(t, "--nats", natsURL, "secrets", "set", "pin", `{"user":"admin","pin":123}`, "--secrets-key-file", keyFile); code == 0 ||
		!strings.Contains(errOut, "cannot be redacted") || !strings.Contains(errOut, "pin") {
		t.Fatalf("short secret: code %d, %s", code, errOut)
	}
	// Webhook keys are kept apart: listed with --hook only.
	if _, errOut, code = run(t, "--nats", natsURL, "secrets", "set", "--hook", "gh-hook", `"hook-key-value-1234"`, "--secrets-key-file", keyFile); code != 0 {
		t.Fatalf("secrets set --hook: %s", errOut)
	}
	if out, _, code = run(t, "--nats", natsURL, "secrets", "ls", "--hook"); code != 0 || strings.TrimSpace(out) != "gh-hook" {
		t.Fatalf("secrets ls --hook: %q", out)
	}
	if out, _, _ = run(t, "--nats", natsURL, "secrets", "ls"); strings.Contains(out, "gh-hook") {
		t.Fatalf("a webhook key is listed among the secrets: %q", out)
	}
	if _, errOut, code = run(t, "--nats", natsURL, "secrets", "rm", "--hook", "gh-hook"); code != 0 {
		t.Fatalf("secrets rm --hook: %s", errOut)
	}

	// Metrics.
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`host_runs_total{function="hello",outcome="succeeded"} 2`, "host_run_duration_seconds_bucket", "host_queue_wait_seconds_bucket", "host_jail_start_seconds_bucket", "host_runs_in_flight"} {
		if !strings.Contains(string(body), want) {
			t.Fatalf("metrics lack %q", want)
		}
	}

	// SIGTERM drains and exits cleanly.
	serve.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("host exited with %v after SIGTERM", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("host did not exit within 60s of SIGTERM")
	}
	if !strings.Contains(logs.String(), "draining") {
		t.Fatalf("no drain in the logs")
	}
}

func replyData(m *nats.Msg) string {
	if m == nil {
		return ""
	}
	return string(m.Data)
}

func TestCheck(t *testing.T) {
	out, errOut, code := run(t, "check", "../../functions")
	if code != 0 || !strings.Contains(out, "hello") || !strings.Contains(out, "functions ok") {
		t.Fatalf("check examples: code %d\n%s\n%s", code, out, errOut)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "good.py"), []byte("def main():\n    return 1\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "bad.py"), []byte("# sandbox\n# timeout: soon\ndef main():\n    return 1\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "Bad Name.py"), []byte("def main():\n    return 1\n"), 0o644)
	out, errOut, code = run(t, "check", dir)
	if code == 0 || !strings.Contains(out, "good") || !strings.Contains(errOut, "bad.py:2:") || !strings.Contains(errOut, "Bad Name.py") {
		t.Fatalf("check bad dir: code %d\n%s\n%s", code, out, errOut)
	}
}

// TestCheckRefusesDependenciesBeyondTheFunction: `host check` reports a package.json
// dependency on a host folder and a requirements.txt line reading a host file, each as
// file:line, without reading the host file, and passes the rest.
func TestCheckRefusesDependenciesBeyondTheFunction(t *testing.T) {
	host := filepath.Join(t.TempDir(), "host")
	os.Mkdir(host, 0o700)
	secret := filepath.Join(host, "secret")
	os.WriteFile(secret, []byte("host-secret-content-7f3a\n"), 0o600)
	dir := t.TempDir()
	for name, content := range map[string]string{
		"good.py":                     "def main():\n    return 1\n",
		"npm/main.ts":                 "export function main() { return 1 }\n",
		"npm/package.json":            "{\n  \"dependencies\": {\n    \"x\": \"file:" + host + "\"\n  }\n}\n",
		"pip/main.py":                 "def main():\n    return 1\n",
		"pip/requirements.txt":        "requests==2.31.0\n-r " + secret + "\n-c " + secret + "\n",
		"vendor/main.ts":              "export function main() { return 1 }\n",
		"vendor/package.json":         `{"dependencies": {"pkg": "file:./lib/pkg"}}`,
		"vendor/lib/pkg/package.json": `{"name": "pkg", "version": "1.0.0"}`,
	} {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, errOut, code := run(t, "check", dir)
	t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
	if code != 1 || !strings.Contains(out, "good") || !strings.Contains(out, "vendor") || strings.Contains(out, "functions ok") {
		t.Fatalf("code %d", code)
	}
	for _, want := range []string{
		filepath.Join(dir, "npm", "package.json") + `:3: dependencies "x": "file:` + host + `"`,
		filepath.Join(dir, "pip", "requirements.txt") + ":2:",
		filepath.Join(dir, "pip", "requirements.txt") + ":3:",
		"2 of 4 function files refused",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
	if strings.Contains(out+errOut, "host-secret-content") {
		t.Error("the host file's content is in the output")
	}
}

func TestClientSaysWhenItCannotConnect(t *testing.T) {
	_, errOut, code := run(t, "--nats", "nats://"+freeAddr(t), "jobs")
	if code == 0 || !strings.Contains(errOut, "connect to NATS") {
		t.Fatalf("code %d: %s", code, errOut)
	}
}

// TestCheckCatchesWhatFailsAtOnce: files that load but could not run are refused, each
// error naming its file (and line).
func TestCheckCatchesWhatFailsAtOnce(t *testing.T) {
	if _, err := exec.LookPath("bun"); err != nil {
		t.Skip("SKIPPED LOUDLY: bun is not installed; .ci/run installs it (npm install -g bun@1.4.4)")
	}
	cases := []struct{ file, src, want string }{
		{"syntax.py", "def main(:\n    return 1\n", "syntax.py:1:"},
		{"nomain.py", "def helper():\n    return 1\n", "nomain.py defines no top-level main"},
		{"syntax.ts", "export function main( {\n", "syntax.ts:1:"},
		{"nomain.ts", "export const x = 1\n", "nomain.ts exports no main"},
		{"syntax.sh", "if true; then\n", "syntax.sh"},
		{"cron.py", "# schedule: */61 * * * *\ndef main():\n    return 1\n", "cron.py:1: schedule"},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "good.py"), []byte("def main():\n    return 1\n"), 0o644)
			os.WriteFile(filepath.Join(dir, c.file), []byte(c.src), 0o644)
			out, errOut, code := run(t, "check", dir)
			if code != 1 || !strings.Contains(errOut, c.want) || !strings.Contains(out, "good") || strings.Contains(out, "functions ok") {
				t.Fatalf("code %d\nstdout %s\nstderr %s", code, out, errOut)
			}
			if n := strings.Count(errOut, filepath.Join(dir, c.file)); n != 1 {
				t.Fatalf("the file is named %d times, want once: %s", n, errOut)
			}
			if _, err := os.Stat(filepath.Join(dir, "__pycache__")); err == nil {
				t.Fatal("check wrote __pycache__ into the functions directory")
			}
		})
	}
}

// healthz is nil once the host serving HTTP at addr answers /healthz with 200, else what it
// answered.
func healthz(addr string) error {
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/healthz answered %s", resp.Status)
	}
	return nil
}

// TestCheckRefusesToolCycles: `host check` refuses each function on a tools: cycle, at its
// tools: line, and exits non-zero; the rest is ok.
func TestCheckRefusesToolCycles(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.py"), []byte("# sandbox\n# tools: a\ndef main():\n    return 1\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "b.py"), []byte("# tools: c\ndef main():\n    return 1\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "c.py"), []byte("# tools: b\ndef main():\n    return 1\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "good.py"), []byte("def main():\n    return 1\n"), 0o644)
	out, errOut, code := run(t, "check", dir)
	if code == 0 || !strings.Contains(out, "good") || strings.Contains(out, "ok  a") ||
		!strings.Contains(errOut, filepath.Join(dir, "a.py")+":2: tools: a calls back into itself (a → a)") ||
		!strings.Contains(errOut, filepath.Join(dir, "b.py")+":1: tools: c calls back into itself (b → c → b)") ||
		!strings.Contains(errOut, filepath.Join(dir, "c.py")+":1:") || !strings.Contains(errOut, "3 of 4 function files refused") {
		t.Fatalf("check of a dir with tools: cycles: code %d\n%s\n%s", code, out, errOut)
	}
}
