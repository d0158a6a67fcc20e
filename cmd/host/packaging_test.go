package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	unitPath       = "../../packaging/host.service"
	dockerfilePath = "../../Dockerfile"
)

// unitSettings reads a systemd unit's Key=Value lines (the last one of a key wins, as in
// systemd for these keys).
func unitSettings(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	kv := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "[") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is no Key=Value line", path, line)
		}
		kv[k] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return kv
}

// checkServeArgs checks that every --flag in a serve command line packaged for users is one
// serve has: a renamed flag must not leave the unit or the image failing at start.
func checkServeArgs(t *testing.T, where string, args []string, flags map[string]string) {
	t.Helper()
	i := 0
	for i < len(args) && args[i] != "serve" {
		i++
	}
	if i == len(args) {
		t.Fatalf("%s: no serve in %q", where, args)
	}
	for _, a := range args[i+1:] {
		name, isFlag := strings.CutPrefix(a, "--")
		if !isFlag {
			continue
		}
		name, _, _ = strings.Cut(name, "=")
		if _, ok := flags[name]; !ok && name != configFlag {
			t.Errorf("%s passes --%s, which host serve does not have", where, name)
		}
	}
}

func TestUnitFile(t *testing.T) {
	unit := unitSettings(t, unitPath)
	flags := serveHelpFlags(t)

	execStart := strings.Fields(unit["ExecStart"])
	if len(execStart) < 2 || execStart[0] != "/usr/local/bin/host" {
		t.Fatalf("ExecStart=%q, want /usr/local/bin/host serve ...", unit["ExecStart"])
	}
	checkServeArgs(t, "ExecStart", execStart, flags)

	// systemd must not kill the host in the middle of its drain.
	stop, err := time.ParseDuration(unit["TimeoutStopSec"])
	if err != nil {
		t.Fatalf("TimeoutStopSec=%q: %v", unit["TimeoutStopSec"], err)
	}
	drain, err := time.ParseDuration(flags["drain-timeout"])
	if err != nil {
		t.Fatalf("serve --help: drain-timeout default %q: %v", flags["drain-timeout"], err)
	}
	if stop <= drain+5*time.Second {
		t.Errorf("TimeoutStopSec=%v leaves no time after --drain-timeout's %v for HTTP and NATS to close", stop, drain)
	}
	for k, want := range map[string]string{"KillMode": "mixed", "NoNewPrivileges": "yes", "ProtectSystem": "strict", "MemoryDenyWriteExecute": "no"} {
		if unit[k] != want {
			t.Errorf("%s=%q, want %q (see the comment above it)", k, unit[k], want)
		}
	}
	// Each namespace the jail makes must be allowed (bwrap --unshare-user, -pid, -ipc, -uts,
	// -cgroup-try, -net, and its mount namespace).
	allowed := strings.Fields(unit["RestrictNamespaces"])
	for _, ns := range []string{"user", "mnt", "pid", "net", "ipc", "uts", "cgroup"} {
		if !slices.Contains(allowed, ns) {
			t.Errorf("RestrictNamespaces=%q lacks %s, which every jail needs", unit["RestrictNamespaces"], ns)
		}
	}
	// The directories host.toml names are the ones the unit makes and lets the host write.
	for _, key := range []string{"data", "secrets-key-file"} {
		dir := strings.Trim(exampleSettings[key], `"`)
		if key == "secrets-key-file" {
			dir = filepath.Dir(dir)
		}
		name, ok := strings.CutPrefix(dir, "/var/lib/")
		if !ok || !slices.Contains(strings.Fields(unit["StateDirectory"]), name) {
			t.Errorf("host.toml's %s is under %s, which is not in StateDirectory=%s", key, dir, unit["StateDirectory"])
		}
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("SKIPPING systemd-analyze verify: systemd-analyze is not installed (apt-get install systemd); the checks above ran")
	}
	// verify wants ExecStart's binary to exist: point it at the one under test.
	data, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	unitCopy := filepath.Join(t.TempDir(), "host.service")
	if err := os.WriteFile(unitCopy, []byte(strings.ReplaceAll(string(data), "/usr/local/bin/host ", hostBin+" ")), 0o644); err != nil {
		t.Fatal(err)
	}
	// verify exits 0 on unknown keys and bad values ("..., ignoring"); anything it prints is
	// a finding.
	out, err := exec.Command(analyze, "verify", unitCopy).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unitPath, err, out)
	}
}

func TestUnitDockerfileEntrypoint(t *testing.T) {
	data, err := os.ReadFile(dockerfilePath)
	if err != nil {
		t.Fatal(err)
	}
	var entry []string
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "ENTRYPOINT "); ok {
			if err := json.Unmarshal([]byte(rest), &entry); err != nil {
				t.Fatalf("ENTRYPOINT %s: want the exec form (a JSON array): %v", rest, err)
			}
		}
	}
	if len(entry) == 0 {
		t.Fatal("the Dockerfile has no ENTRYPOINT")
	}
	checkServeArgs(t, "the Dockerfile's ENTRYPOINT", entry, serveHelpFlags(t))
	for _, want := range []string{"--data", "/data", "--functions", "/functions"} {
		if !slices.Contains(entry, want) {
			t.Errorf("ENTRYPOINT %q lacks %s", entry, want)
		}
	}
}
