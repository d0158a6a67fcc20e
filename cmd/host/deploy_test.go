package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// The deploy commands as an operator runs them: refusals with file:line and nothing stored,
// a deploy, an unchanged one, the history, a diff, a rollback (also to nothing), a pull.
func TestDeployCommands(t *testing.T) {
	srv := natstest.Server(t, bus.ServerConfig{StoreDir: t.TempDir(), SyncInterval: time.Minute}, zap.NewNop())
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// The CLI reads the job records' bucket, which a host makes.
	if _, err := jobs.Open(context.Background(), js, time.Hour, 1); err != nil {
		t.Fatal(err)
	}
	url := "--nats=" + srv.ClientURL()
	dir := t.TempDir()
	write := func(name, content string) {
		os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644)
	}
	write("hello.py", "def main():\n    return 1\n")
	write("bad.py", "def main(:\n    return 1\n")
	out, errOut, code := run(t, url, "deploy", dir, "-m", "first")
	if code == 0 || !strings.Contains(errOut, "refused:") || !strings.Contains(errOut, "bad.py:1:") || !strings.Contains(errOut, "nothing was deployed") {
		t.Fatalf("deploy of a refused set: code %d\n%s\n%s", code, out, errOut)
	}
	if out, _, _ := run(t, url, "deployments"); !strings.Contains(out, "no deployments yet") {
		t.Fatalf("a refused deploy stored something:\n%s", out)
	}
	os.Remove(filepath.Join(dir, "bad.py"))
	if out, errOut, code := run(t, url, "deploy", dir, "-m", "first"); code != 0 || !strings.Contains(out, "deployment 1 stored (1 functions): +hello") {
		t.Fatalf("deploy: code %d\n%s\n%s", code, out, errOut)
	}
	if out, _, code := run(t, url, "deploy", dir); code != 0 || !strings.Contains(out, "unchanged: deployment 1") {
		t.Fatalf("unchanged deploy: code %d\n%s", code, out)
	}
	write("hello.py", "# timeout: 5s\ndef main():\n    return 2\n")
	if out, errOut, code := run(t, url, "deploy", dir, "-m", "second"); code != 0 || !strings.Contains(out, "deployment 2 stored (1 functions): ~hello") {
		t.Fatalf("second deploy: code %d\n%s\n%s", code, out, errOut)
	}
	out, _, _ = run(t, url, "deployments")
	if !strings.Contains(out, "*2") || !strings.Contains(out, "second") || !strings.Contains(out, " 1 ") {
		t.Fatalf("deployments:\n%s", out)
	}
	if out, _, _ := run(t, url, "diff", "1", "2", "hello"); !strings.Contains(out, "+# timeout: 5s") || !strings.Contains(out, "-    return 1") {
		t.Fatalf("diff:\n%s", out)
	}
	if _, errOut, code := run(t, url, "rollback", "7"); code == 0 || !strings.Contains(errOut, "deployment 7 does not exist") {
		t.Fatalf("rollback to nothing: code %d %s", code, errOut)
	}
	if out, errOut, code := run(t, url, "rollback", "1"); code != 0 || !strings.Contains(out, "deployment 3 stored, equal to 1") {
		t.Fatalf("rollback: code %d\n%s\n%s", code, out, errOut)
	}
	pulled := filepath.Join(t.TempDir(), "fns")
	if out, errOut, code := run(t, url, "pull", pulled); code != 0 || !strings.Contains(out, "deployment 3 written") {
		t.Fatalf("pull: code %d\n%s\n%s", code, out, errOut)
	}
	if b, _ := os.ReadFile(filepath.Join(pulled, "hello.py")); string(b) != "def main():\n    return 1\n" {
		t.Fatalf("pulled hello.py = %q", b)
	}
}
