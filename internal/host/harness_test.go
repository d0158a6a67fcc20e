package host_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/host"
	"github.com/agenthost/host/internal/jobs"
)

// harness is a real embedded nats-server with a host serving a functions directory, and a
// separate client connection that talks to it as a user would.
type harness struct {
	t     *testing.T
	dir   string
	fnDir string
	srv   *server.Server
	nc    *nats.Conn // the user's connection
	host  *host.Host
	store *jobs.Store
	key   []byte // the secrets key
}

func requireBwrap(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("SKIPPED LOUDLY: bubblewrap (bwrap) is not installed; .ci/run installs it (apt-get install bubblewrap)")
	}
}

// newHarness writes files (path relative to the functions directory → content) and starts a
// host on them.
func newHarness(t *testing.T, files map[string]string, tweak ...func(*host.Config)) *harness {
	t.Helper()
	requireBwrap(t)
	// t.TempDir is private to root; the jail user must be able to pass through to its job.
	dir, err := os.MkdirTemp("", "host-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, dir: dir, fnDir: filepath.Join(dir, "functions")}
	if err := os.MkdirAll(h.fnDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		h.write(name, content)
	}
	log := zaptest.NewLogger(t)
	h.srv, err = bus.StartServer(bus.ServerConfig{Listen: "127.0.0.1:-1", StoreDir: filepath.Join(dir, "nats")}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.srv.Shutdown)
	ctx := context.Background()
	hostConn, err := bus.Connect(ctx, bus.ConnectOptions{InProcess: h.srv, Name: "test-host"}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hostConn.Close)
	h.key = make([]byte, 32)
	rand.Read(h.key)
	cfg := host.Config{FunctionsDir: h.fnDir, DataDir: filepath.Join(dir, "data"), HostID: "test", AckWait: 5 * time.Second, SecretsKey: h.key}
	for _, f := range tweak {
		f(&cfg)
	}
	h.host, err = host.New(cfg, hostConn, log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if err := h.host.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h.host.Shutdown(ctx)
	})
	h.nc, err = nats.Connect(h.srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.nc.Close)
	h.store = h.host.Jobs()
	return h
}

func (h *harness) write(name, content string) {
	h.t.Helper()
	p := filepath.Join(h.fnDir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		h.t.Fatal(err)
	}
	mode := os.FileMode(0o644)
	if len(content) > 2 && content[:2] == "#!" {
		mode = 0o755
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		h.t.Fatal(err)
	}
}

// call makes an agent.call request and returns the reply.
func (h *harness) call(name, payload string) *nats.Msg {
	h.t.Helper()
	return h.callMsg(nats.NewMsg(bus.CallSubject(name)), payload)
}

func (h *harness) callMsg(m *nats.Msg, payload string) *nats.Msg {
	h.t.Helper()
	m.Data = []byte(payload)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	reply, err := h.nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		h.t.Fatalf("request %s %s: %v", m.Subject, payload, err)
	}
	return reply
}

// sub subscribes before something is published and returns the messages as they come.
func (h *harness) sub(subject string) <-chan *nats.Msg {
	h.t.Helper()
	ch := make(chan *nats.Msg, 256)
	s, err := h.nc.ChanSubscribe(subject, ch)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { s.Unsubscribe() })
	if err := h.nc.Flush(); err != nil {
		h.t.Fatal(err)
	}
	return ch
}

// next waits for one message, failing the test after a generous bound.
func (h *harness) next(ch <-chan *nats.Msg) *nats.Msg {
	h.t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(60 * time.Second):
		h.t.Fatal("no message within 60s")
		return nil
	}
}

// publish sends a trigger through JetStream, as `nats pub` would with the stream in place.
func (h *harness) publish(subject, payload string, hdr map[string]string) {
	h.t.Helper()
	m := nats.NewMsg(subject)
	m.Data = []byte(payload)
	for k, v := range hdr {
		m.Header.Set(k, v)
	}
	if err := h.nc.PublishMsg(m); err != nil {
		h.t.Fatal(err)
	}
	if err := h.nc.Flush(); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) record(id string) *jobs.Record {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := h.store.WaitFinal(ctx, id)
	if err != nil {
		h.t.Fatalf("job %s: %v", id, err)
	}
	return r
}

// eventually polls cond until it holds, for things with no event to wait on (a file watcher).
func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("%s: did not happen within 30s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

// addHost starts another host on the same NATS and functions, as a second machine would.
func (h *harness) addHost(t *testing.T, tweak ...func(*host.Config)) *host.Host {
	t.Helper()
	log := zaptest.NewLogger(t).Named("host2")
	nc, err := bus.Connect(context.Background(), bus.ConnectOptions{URL: h.srv.ClientURL(), Name: "test-host-2"}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	cfg := host.Config{FunctionsDir: h.fnDir, DataDir: filepath.Join(h.dir, "data2"), HostID: "test-2", AckWait: 5 * time.Second, SecretsKey: h.key}
	for _, f := range tweak {
		f(&cfg)
	}
	second, err := host.New(cfg, nc, log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		second.Shutdown(ctx)
	})
	return second
}
