package runtimes

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A job's interpreter must read the shim's bytecode, not compile it: run as jobs run it (-s -B),
// verbose import says where each module's code object came from.
func TestCompiledShimIsWhatJobsLoad(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("LOUD SKIP: no python3 on PATH; .ci/run installs it (scripts/setup)")
	}
	dir := t.TempDir()
	must(t, WriteShims(dir))
	must(t, CompileShims(dir, os.Getenv("PATH")))
	cache, err := filepath.Glob(filepath.Join(dir, "__pycache__", "*.pyc"))
	must(t, err)
	if len(cache) < 2 {
		t.Fatalf("compiled %v, want the shim module and the fork server", cache)
	}
	for _, p := range append(cache, filepath.Join(dir, "__pycache__")) {
		info, err := os.Stat(p)
		must(t, err)
		if info.Mode().Perm()&0o044 != 0o044 {
			t.Errorf("%s is %v: the jobs' user cannot read it", p, info.Mode().Perm())
		}
	}
	load := func() string {
		// No script: the shim refuses with its usage, after importing the module.
		out, _ := exec.Command(py, "-s", "-B", "-v", filepath.Join(dir, pythonShim)).CombinedOutput()
		return string(out)
	}
	module := filepath.Join(dir, pythonShimModule)
	out := load()
	if !strings.Contains(out, "usage: shim.py") {
		t.Fatalf("the shim did not run to its usage line:\n%s", out)
	}
	if !strings.Contains(out, "code object from '"+filepath.Join(dir, "__pycache__")) || strings.Contains(out, "code object from "+module+"\n") {
		t.Errorf("the shim module was not loaded from its bytecode:\n%s", grepLines(out, "_agenthost_shim"))
	}

	// A shim changed after it was compiled (an upgrade whose compile failed) is compiled
	// from its source again, not run from stale bytecode.
	src, err := os.ReadFile(module)
	must(t, err)
	must(t, os.WriteFile(module, append(src, []byte("\n# changed\n")...), 0o644))
	if out := load(); !strings.Contains(out, "code object from "+module+"\n") {
		t.Errorf("a changed shim ran from its stale bytecode:\n%s", grepLines(out, "_agenthost_shim"))
	}
}

// Without any python3 there is nothing to compile, and nothing fails.
func TestCompileShimsWithoutPython(t *testing.T) {
	dir := t.TempDir()
	must(t, WriteShims(dir))
	if err := CompileShims(dir, t.TempDir()); err != nil {
		t.Fatalf("CompileShims with no python3 on its path: %v, want nothing to do", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "__pycache__")); !os.IsNotExist(err) {
		t.Errorf("__pycache__ made without a python3: %v", err)
	}
}

func grepLines(s, sub string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}
