package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agenthost/host/internal/testkit/hosttest"
)

func TestNewRefuses(t *testing.T) {
	dir := t.TempDir()
	if _, errOut, code := run(t, "new", "taken", "--functions", dir); code != 0 {
		t.Fatalf("new: %s", errOut)
	}
	before, _ := os.ReadFile(filepath.Join(dir, "taken.py"))
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"taken"}, "already exists"},
		{[]string{"taken", "--lang", "ts"}, "already exists"}, // another language, the same function name
		{[]string{"Bad Name"}, "must match"},
		{[]string{"x.y"}, "must match"},
		{[]string{"ok", "--lang", "rb"}, "want py, ts or sh"},
	}
	for _, c := range cases {
		_, errOut, code := run(t, append([]string{"new", "--functions", dir}, c.args...)...)
		if code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("new %v: code %d, %s", c.args, code, errOut)
		}
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "taken.py")); !bytes.Equal(before, after) {
		t.Fatal("new overwrote an existing function")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("refused news left files: %v", entries)
	}
}

// TestNewFunctionsPassCheckAndRun: what `host new` writes passes `host check` and runs, as
// written, on a real host.
func TestNewFunctionsPassCheckAndRun(t *testing.T) {
	for _, tool := range []string{"bwrap", "bun"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("SKIPPED LOUDLY: %s is not installed; .ci/run installs it", tool)
		}
	}
	e := newExposureEnv(t, nil)
	dir := e.fns
	langs := []string{"py", "ts", "sh"}
	for _, lang := range langs {
		out, errOut, code := run(t, "new", "hi-"+lang, "--lang", lang, "--functions", dir)
		if code != 0 || !strings.Contains(out, "hi-"+lang) {
			t.Fatalf("new --lang %s: code %d, %s", lang, code, errOut)
		}
	}
	out, errOut, code := run(t, "check", dir)
	if code != 0 || !strings.Contains(out, "3 functions ok") {
		t.Fatalf("check: code %d\n%s\n%s", code, out, errOut)
	}
	for _, lang := range langs {
		src, _ := os.ReadFile(filepath.Join(dir, "hi-"+lang+"."+lang))
		for _, word := range []string{"sandbox", "volume:", "schedule:", "on:", "timeout:", "network:", "secrets:"} {
			if !strings.Contains(string(src), word) {
				t.Errorf("hi-%s lacks %q", lang, word)
			}
		}
	}

	natsAddr := freeAddr(t)
	startServe(t, e, nil, freeAddr(t), "--nats-listen", natsAddr)
	for _, lang := range langs {
		out, errOut, code := run(t, "--nats", "nats://"+natsAddr, "invoke", "hi-"+lang, `{"name":"Ada"}`, "--wait")
		if code != 0 || strings.TrimSpace(out) != `{"greeting":"Hello, Ada!"}` {
			t.Errorf("invoke hi-%s: code %d, stdout %q, stderr %q", lang, code, out, errOut)
		}
	}
}

// TestNewThenInvokeAtOnce: `host new greet` then `host invoke greet --wait` at once, against a
// running host, as the README's first step does: the invoke waits for the reload the new file
// caused, says so, and prints the result; a name the directory does not have is still refused
// at once, and a function the host refuses says why.
func TestNewThenInvokeAtOnce(t *testing.T) {
	hosttest.RequireBwrap(t)
	e := newExposureEnv(t, nil)
	natsAddr := freeAddr(t)
	startServe(t, e, nil, freeAddr(t), "--nats-listen", natsAddr)
	url := "nats://" + natsAddr
	if _, errOut, code := run(t, "new", "greet", "--functions", e.fns); code != 0 {
		t.Fatalf("new greet: exit %d: %s", code, errOut)
	}
	out, errOut, code := run(t, "--nats", url, "invoke", "greet", `{"name":"Ada"}`, "--wait", "--functions", e.fns)
	if code != 0 || strings.TrimSpace(out) != `{"greeting":"Hello, Ada!"}` {
		t.Fatalf("invoke greet --wait right after new: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if !strings.Contains(errOut, "no host serves it yet") || !strings.Contains(errOut, "function greet is loaded") {
		t.Errorf("invoke did not say it waited for the host to load greet: %q", errOut)
	}

	if _, errOut, code := run(t, "--nats", url, "invoke", "nosuch", "--functions", e.fns); code != 2 || !strings.Contains(errOut, "no host serves this function") || strings.Contains(errOut, "waiting") {
		t.Errorf("invoke of a name the directory lacks: exit %d, %q; want refused at once", code, errOut)
	}
	if err := os.WriteFile(filepath.Join(e.fns, "broken.py"), []byte("# timeout: soon\ndef main():\n    return 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := run(t, "--nats", url, "invoke", "broken", "--functions", e.fns); code != 2 || !strings.Contains(errOut, "is refused, so no host will serve it") || !strings.Contains(errOut, "timeout") {
		t.Errorf("invoke of a function the host refuses: exit %d, %q; want why, at once", code, errOut)
	}
}
