package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/host/internal/testkit/testwait"
)

// TestWarmJailsGoWithAKilledHost: a host killed with SIGKILL leaves no warm jail behind once
// it starts again: not a process, not a directory.
func TestWarmJailsGoWithAKilledHost(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("SKIPPED LOUDLY: bubblewrap (bwrap) is not installed; .ci/run installs it")
	}
	root, err := os.MkdirTemp("", "host-warm-kill-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(root)
	os.Chmod(root, 0o755)
	fnDir, data := filepath.Join(root, "functions"), filepath.Join(root, "data")
	if err := os.MkdirAll(fnDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// A name of this run's own: the jails' command lines carry it, and no other test's do.
	name := fmt.Sprintf("killprobe%d", time.Now().UnixNano()%1_000_000)
	if err := os.WriteFile(filepath.Join(fnDir, name+".sh"), []byte("# sandbox\n# warm: 2\necho '\"ok\"'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	marker := "/host/fn/" + name + ".sh"

	var logs bytes.Buffer
	start := func() *exec.Cmd {
		t.Helper()
		httpAddr := freeAddr(t)
		serve := exec.Command(hostBin, "serve", "--functions", fnDir, "--data", data, "--nats-listen", freeAddr(t),
			"--http", httpAddr, "--secrets-key-file", filepath.Join(root, "secrets.key"), "--http-token-file", filepath.Join(root, "http.token"))
		serve.Stdout, serve.Stderr = &logs, &logs
		if err := serve.Start(); err != nil {
			t.Fatal(err)
		}
		testwait.For(t, "the host to be healthy", time.Minute, func() error { return healthz(httpAddr) })
		return serve
	}
	defer func() {
		if t.Failed() {
			t.Logf("host logs:\n%s", logs.String())
		}
	}()

	first := start()
	var jails []int
	testwait.For(t, "two warm jails waiting", time.Minute, func() error {
		if jails = processesWith(marker); len(jails) < 2 {
			return fmt.Errorf("warm jails: pids %v", jails)
		}
		return nil
	})
	dirs, _ := filepath.Glob(filepath.Join(data, "run", "warm-"+name+"-*"))
	if len(dirs) < 2 {
		t.Fatalf("warm jail directories: %v", dirs)
	}
	first.Process.Kill()
	first.Wait()

	second := start()
	defer func() {
		second.Process.Signal(syscall.SIGTERM)
		second.Wait()
	}()
	for _, pid := range jails {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(b), marker) {
			t.Errorf("process %d of a warm jail of the killed host is still there: %q", pid, b)
		}
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("directory %s of a warm jail of the killed host is still there", d)
		}
	}
}

// processesWith returns the pids whose command line contains s.
func processesWith(s string) []int {
	var pids []int
	entries, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, e := range entries {
		b, err := os.ReadFile(e)
		if err != nil || !strings.Contains(string(b), s) {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(e, "/proc/%d/cmdline", &pid); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestServeRefusesBadWarmFlags: a bad --warm is refused at start, saying what it wants.
func TestServeRefusesBadWarmFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--warm", "-1"}, "--warm -1: want a number of jails from 0 (none) to 64"},
		{[]string{"--warm", "65"}, "--warm 65: want a number of jails from 0 (none) to 64"},
		{[]string{"--warm", "lots"}, `invalid argument "lots" for "--warm"`},
		{[]string{"--warm-max", "-2"}, "want positive caps"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			data := t.TempDir()
			args := append([]string{"serve", "--data", data, "--functions", data, "--secrets-key-file", filepath.Join(data, "key"),
				"--nats-listen", freeAddr(t), "--http", freeAddr(t)}, c.args...)
			_, stderr, code := run(t, args...)
			if code == 0 || !strings.Contains(stderr, c.want) {
				t.Fatalf("exit %d, stderr %q; want a failure saying %q", code, stderr, c.want)
			}
		})
	}
}
