package natstest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// NATSCLI is the path of the stock `nats` CLI (github.com/nats-io/natscli), from PATH or
// $(go env GOPATH)/bin, where scripts/setup installs it. Without it the test is skipped, and
// fails instead when $NATSCLI_REQUIRE is set (CI, where a skip would hide the test).
func NATSCLI(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("nats"); err == nil {
		return p
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
			gopath = strings.TrimSpace(string(out))
		}
	}
	for _, dir := range filepath.SplitList(gopath) {
		p := filepath.Join(dir, "bin", "nats")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	msg := "SKIPPING: the stock nats CLI is not installed (neither on PATH nor in $(go env GOPATH)/bin); install it with scripts/setup or `go install github.com/nats-io/natscli/nats@v0.5.0`"
	if os.Getenv("NATSCLI_REQUIRE") != "" {
		t.Fatal(msg + " ($NATSCLI_REQUIRE is set)")
	}
	t.Skip(msg)
	return ""
}

// RunNATSCLI runs the stock nats CLI with args against url as user, password, receiving replies
// under inboxPrefix, and returns what it wrote (stdout and stderr) and its error. It runs with
// a home of its own, so no context of the machine's user applies.
func RunNATSCLI(t testing.TB, url, user, password, inboxPrefix string, args ...string) (string, error) {
	t.Helper()
	bin := NATSCLI(t)
	home := t.TempDir()
	full := []string{"--server", url, "--user", user, "--password", password, "--timeout", "3s"}
	if inboxPrefix != "" {
		full = append(full, "--inbox-prefix", inboxPrefix)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(full, args...)...)
	cmd.Env = []string{"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"), "PATH=" + os.Getenv("PATH")}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}
