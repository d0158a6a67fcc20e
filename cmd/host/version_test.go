package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestVersionFlagMatchesCommand(t *testing.T) {
	cmd, stderr, code := run(t, "version")
	if code != 0 {
		t.Fatalf("host version: exit %d: %s", code, stderr)
	}
	flag, stderr, code := run(t, "--version")
	if code != 0 {
		t.Fatalf("host --version: exit %d: %s", code, stderr)
	}
	if cmd != flag {
		t.Errorf("host version and host --version differ:\n%s\n---\n%s", cmd, flag)
	}
	for _, want := range []string{"host version ", "commit: ", "go:     " + runtime.Version()} {
		if !strings.Contains(cmd, want) {
			t.Errorf("host version says %q, without %q", cmd, want)
		}
	}
}

// TestRelease builds the way scripts/release does (for this machine's architecture only) and
// checks what the binary says about itself and what it does not give away.
func TestRelease(t *testing.T) {
	gitOut := func(args ...string) string {
		out, err := exec.Command("git", args...).Output()
		if err != nil {
			t.Skipf("SKIPPING the release test: not in a git checkout (git %s: %v); scripts/release needs one", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out))
	}
	head := gitOut("rev-parse", "HEAD")
	top := gitOut("rev-parse", "--show-toplevel")
	modified := gitOut("status", "--porcelain") != ""

	dist := t.TempDir()
	script := exec.Command(filepath.Join(top, "scripts", "release"))
	script.Env = append(os.Environ(), "ARCHS="+runtime.GOARCH, "DIST="+dist, "VERSION=v0.0.0-test")
	if out, err := script.CombinedOutput(); err != nil {
		t.Fatalf("scripts/release: %v\n%s", err, out)
	}
	name := "host-v0.0.0-test-linux-" + runtime.GOARCH
	bin := filepath.Join(dist, name)

	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatalf("%s version --json: %v", name, err)
	}
	var info buildInfo
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatalf("version --json: %v in %s", err, out)
	}
	if info.Commit != head || info.Modified != modified {
		t.Errorf("version --json: commit %s modified %v, want %s (git rev-parse HEAD) modified %v", info.Commit, info.Modified, head, modified)
	}
	if info.Version != "v0.0.0-test" || info.CommitTime == "unknown" || info.GoVersion != runtime.Version() {
		t.Errorf("version --json = %+v, want version v0.0.0-test, a commit time and %s", info, runtime.Version())
	}

	// -trimpath: no path of the machine that built it, neither the checkout's nor the
	// toolchain's or the module cache's.
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	paths := []string{top}
	for _, v := range []string{"GOROOT", "GOMODCACHE"} {
		out, err := exec.Command("go", "env", v).Output()
		if err != nil {
			t.Fatalf("go env %s: %v", v, err)
		}
		paths = append(paths, strings.TrimSpace(string(out)))
	}
	for _, p := range paths {
		if p != "" && bytes.Contains(data, []byte(p)) {
			t.Errorf("%s contains the build machine's path %s", name, p)
		}
	}

	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	check := exec.Command("sha256sum", "--check", "SHA256SUMS")
	check.Dir = dist
	if out, err := check.CombinedOutput(); err != nil || !strings.Contains(string(sums), name) {
		t.Errorf("SHA256SUMS %q does not check: %v %s", sums, err, out)
	}
}
