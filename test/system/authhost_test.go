package system_test

import (
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/host"
)

// The tests of NATS authorization (callers, inboxes, users' logins, who may decide) each run a
// real host as `serve` wires it (app.New, real bwrap) on an embedded server of the test's own
// configuration, connected as the hosts user over the socket, as a host on another machine.

// authDir makes a directory the jail's user can read (under /tmp, 0755, not the test's private
// TempDir) with files in its functions/.
func authDir(t *testing.T, prefix string, files map[string]string) (dir, fnDir string) {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	fnDir = filepath.Join(dir, "functions")
	os.MkdirAll(fnDir, 0o755)
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(fnDir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, fnDir
}

// authHost starts a host serving fnDir on the server at url, connected as cred, with a fresh
// secrets key (returned); it shuts down at the test's end.
func authHost(t *testing.T, ctx context.Context, url string, cred bus.Credential, dir, fnDir string, log *zap.Logger) (*app.Host, *nats.Conn, []byte) {
	t.Helper()
	hostConn, err := bus.Connect(ctx, bus.ConnectOptions{URL: url, User: cred.User, Password: cred.Password, Name: "host"}, log)
	if err != nil {
		t.Fatalf("the host cannot connect as %s: %v", cred.User, err)
	}
	t.Cleanup(hostConn.Close)
	key := make([]byte, 32)
	rand.Read(key)
	h, err := app.New(ctx, app.Config{Config: host.Config{FunctionsDir: fnDir, DataDir: filepath.Join(dir, "data"), HostID: "test", AckWait: 5 * time.Second},
		SecretsKey: key}, hostConn, log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(ctx); err != nil {
		t.Fatalf("a host connected as %s cannot start: %v", cred.User, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h.Shutdown(ctx)
	})
	return h, hostConn, key
}
