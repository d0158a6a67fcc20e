package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
