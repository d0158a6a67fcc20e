// Package hosttest runs a real host for tests: an embedded nats-server with JetStream on a
// random loopback port (see JetStream), a host serving a functions directory, its web face
// (Web), and a separate client connection that talks to it as a user would. New builds the host
// as `host serve` does, jail and all; NewEngine builds the engine alone around a Runner the test
// gives, for tests of how jobs end that must run on any machine.
package hosttest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/host"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/objstore"
	"github.com/agenthost/host/internal/secrets"
	"github.com/agenthost/host/internal/testkit/natstest"
	"github.com/agenthost/host/internal/web"
)

// H is a real embedded nats-server with a host serving a functions directory, and a separate
// client connection that talks to it as a user would.
type H struct {
	t     testing.TB
	Dir   string
	FnDir string
	Srv   *server.Server
	NC    *nats.Conn // the user's connection
	Host  *host.Host
	Store *jobs.Store
	Key   []byte // the secrets key
	// Logs holds every line the host logged, for tests that wait on the host's own word that
	// something happened (a refusal leaves nothing else to observe).
	Logs *observer.ObservedLogs
	// Metrics is the registry the host registered its series with.
	Metrics *prometheus.Registry

	log      *zap.Logger
	hostConn *nats.Conn  // the host's connection
	web      web.Config  // the web face's, as `host serve` would configure it for this host
	cfg      *app.Config // what New built the host from, for Restart
}

// RequireBwrap skips the test, loudly, on a machine without bubblewrap.
func RequireBwrap(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("SKIPPED LOUDLY: bubblewrap (bwrap) is not installed; .ci/run installs it (apt-get install bubblewrap)")
	}
}

// New writes files (path relative to the functions directory → content) and starts a host on
// them, built as `host serve` builds it (package app): jobs run in the real jail, so the test
// is skipped without bubblewrap.
func New(t testing.TB, files map[string]string, tweak ...func(*app.Config)) *H {
	t.Helper()
	RequireBwrap(t)
	h := newH(t, files)
	cfg := app.Config{Config: host.Config{FunctionsDir: h.FnDir, DataDir: filepath.Join(h.Dir, "data"), HostID: "test", AckWait: 5 * time.Second}, SecretsKey: h.Key}
	for _, f := range tweak {
		f(&cfg)
	}
	h.Metrics = prometheus.NewRegistry()
	built, err := app.New(context.Background(), cfg, h.hostConn, h.log, h.Metrics)
	if err != nil {
		t.Fatal(err)
	}
	h.Host, h.web = built.Host, built.Web
	h.web.Metrics = h.Metrics
	h.cfg = &cfg
	h.start()
	return h
}

// Restart stops the host New started as SIGTERM stops `host serve` (no new jobs; running ones
// get drain to finish, then are handed back for redelivery), closes its connection, and starts
// it again from the same configuration on a new connection to the same NATS, over the same
// functions and data directory, as `host serve` started again would. Web serves the new host's
// face from then on; the user's connection (NC, Store) stays.
func (h *H) Restart(drain time.Duration) {
	h.t.Helper()
	if h.cfg == nil {
		h.t.Fatal("Restart: only a host New built can be restarted")
	}
	ctx, cancel := context.WithTimeout(context.Background(), drain)
	h.Host.Shutdown(ctx)
	cancel()
	h.hostConn.Close()
	nc, err := bus.Connect(context.Background(), bus.ConnectOptions{InProcess: h.Srv, Name: "test-host"}, h.log)
	if err != nil {
		h.t.Fatal(err)
	}
	h.hostConn = nc
	h.t.Cleanup(nc.Close)
	h.Metrics = prometheus.NewRegistry()
	built, err := app.New(context.Background(), *h.cfg, nc, h.log, h.Metrics)
	if err != nil {
		h.t.Fatal(err)
	}
	// The cleanup start registered stops h.Host, which is now this one.
	h.Host, h.web = built.Host, built.Web
	h.web.Metrics = h.Metrics
	if err := h.Host.Start(context.Background()); err != nil {
		h.t.Fatal(err)
	}
}

// NewEngine starts a host on files whose jobs run is given: the engine alone, on a real
// embedded NATS, with no jail. It runs on any machine; run is the seam the engine's tests fake.
func NewEngine(t testing.TB, files map[string]string, run host.Runner, tweak ...func(*host.Config)) *H {
	t.Helper()
	h := newH(t, files)
	cfg := host.Config{FunctionsDir: h.FnDir, DataDir: filepath.Join(h.Dir, "data"), HostID: "test", AckWait: 5 * time.Second, Runner: run, IDs: ids.NewKey(h.Key)}
	for _, f := range tweak {
		f(&cfg)
	}
	var err error
	h.Metrics = prometheus.NewRegistry()
	if h.Host, err = host.New(cfg, h.hostConn, h.log, h.Metrics); err != nil {
		t.Fatal(err)
	}
	// No webhooks and no volume store: an engine's test builds neither.
	h.web = web.Config{Engine: h.Host, NC: h.hostConn, FunctionsDir: cfg.FunctionsDir, Metrics: h.Metrics, QueueTimeout: cfg.AckWait, Log: h.log, Sign: ids.NewKey(h.Key).Derive}
	h.start()
	return h
}

// WebConfig is the configuration of the host's web face, for a test of the face to change
// before it builds one with web.New: no token, and loopback only.
func (h *H) WebConfig() web.Config { return h.web }

// Web is the host's web face as `host serve` serves it: webhooks and volume pages only for a
// host New built.
func (h *H) Web() http.Handler { return web.New(h.web) }

// Post sends a POST to a web face at url and returns the status, the body and the headers.
func Post(t testing.TB, url, body string, hdr map[string]string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// newH makes the directories, writes the functions and starts the embedded server and the
// host's connection.
func newH(t testing.TB, files map[string]string) *H {
	t.Helper()
	// t.TempDir is private to root; the jail user must be able to pass through to its job.
	dir, err := os.MkdirTemp("", "host-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	h := &H{t: t, Dir: dir, FnDir: filepath.Join(dir, "functions")}
	if err := os.MkdirAll(h.FnDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		h.Write(name, content)
	}
	observed, logs := observer.New(zap.DebugLevel)
	h.Logs = logs
	h.log = zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), observed))
	h.Srv = natstest.Server(t, bus.ServerConfig{StoreDir: filepath.Join(dir, "nats")}, h.log)
	if h.hostConn, err = bus.Connect(context.Background(), bus.ConnectOptions{InProcess: h.Srv, Name: "test-host"}, h.log); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.hostConn.Close)
	h.Key = make([]byte, 32)
	rand.Read(h.Key)
	return h
}

// start starts the built host, stops it at the test's end and connects the user.
func (h *H) start() {
	h.t.Helper()
	if err := h.Host.Start(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h.Host.Shutdown(ctx)
	})
	var err error
	if h.NC, err = nats.Connect(h.Srv.ClientURL()); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(h.NC.Close)
	js, err := jetstream.New(h.NC)
	if err != nil {
		h.t.Fatal(err)
	}
	if h.Store, err = jobs.Bind(context.Background(), js); err != nil {
		h.t.Fatal(err)
	}
}

// Write writes a file under the functions directory; content starting with #! is executable.
func (h *H) Write(name, content string) {
	h.t.Helper()
	p := filepath.Join(h.FnDir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		h.t.Fatal(err)
	}
	mode := os.FileMode(0o644)
	if len(content) > 2 && content[:2] == "#!" {
		mode = 0o755
	}
	content = reuseAll(content)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		h.t.Fatal(err)
	}
}

// Call makes an agent.call request and returns the reply.
func (h *H) Call(name, payload string) *nats.Msg {
	h.t.Helper()
	return h.CallMsg(nats.NewMsg(bus.CallSubject(name)), payload)
}

// CallMsg makes an agent.call request of m, with payload as its body, and returns the reply.
func (h *H) CallMsg(m *nats.Msg, payload string) *nats.Msg {
	h.t.Helper()
	m.Data = []byte(payload)
	// A first call may install its packages (npm, PyPI) before it runs: bound it generously, so
	// a slow registry on a loaded CI machine is not a failure (the Claude template's first call
	// took 61 s there: 30 s of bun install, 31 s of Claude Code).
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	reply, err := h.NC.RequestMsgWithContext(ctx, m)
	if err != nil {
		h.t.Fatalf("request %s %s: %v", m.Subject, payload, err)
	}
	return reply
}

// Sub subscribes before something is published and returns the messages as they come.
func (h *H) Sub(subject string) <-chan *nats.Msg {
	h.t.Helper()
	ch := make(chan *nats.Msg, 256)
	s, err := h.NC.ChanSubscribe(subject, ch)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { s.Unsubscribe() })
	if err := h.NC.Flush(); err != nil {
		h.t.Fatal(err)
	}
	return ch
}

// Next waits for one message, failing the test after a generous bound.
func (h *H) Next(ch <-chan *nats.Msg) *nats.Msg {
	h.t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(60 * time.Second):
		h.t.Fatal("no message within 60s")
		return nil
	}
}

// Publish sends a trigger through JetStream, as `nats pub` would with the stream in place.
func (h *H) Publish(subject, payload string, hdr map[string]string) {
	h.t.Helper()
	m := nats.NewMsg(subject)
	m.Data = []byte(payload)
	for k, v := range hdr {
		m.Header.Set(k, v)
	}
	if err := h.NC.PublishMsg(m); err != nil {
		h.t.Fatal(err)
	}
	if err := h.NC.Flush(); err != nil {
		h.t.Fatal(err)
	}
}

// Record waits for job id's final record.
func (h *H) Record(id string) *jobs.Record {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := h.Store.WaitFinal(ctx, id)
	if err != nil {
		h.t.Fatalf("job %s: %v", id, err)
	}
	return r
}

// Eventually is natstest.Eventually, the one polling helper of the tests, for this harness's
// test: for things with no event to wait on (a file watcher, a consumer's state).
func (h *H) Eventually(what string, cond func() bool) {
	h.t.Helper()
	natstest.Eventually(h.t, what, cond)
}

// WaitLog waits until the host has logged msg more than after times and returns the newest such
// entry (see Eventually for the bound).
func (h *H) WaitLog(msg string, after int) observer.LoggedEntry {
	h.t.Helper()
	var got []observer.LoggedEntry
	h.Eventually("the host logs "+strconv.Quote(msg), func() bool {
		got = h.Logs.FilterMessage(msg).All()
		return len(got) > after
	})
	return got[len(got)-1]
}

// Decode parses JSON into a T or fails the test.
func Decode[T any](t testing.TB, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

// AddHost starts another host on the same NATS and functions, as a second machine would.
func (h *H) AddHost(t testing.TB, tweak ...func(*app.Config)) *host.Host {
	t.Helper()
	second, _ := h.AddWebHost(t, tweak...)
	return second
}

// AddWebHost is AddHost that also returns the second host's web face, as its own `host serve`
// would serve it, for tests of what every host serves (webhook sources added at run time).
func (h *H) AddWebHost(t testing.TB, tweak ...func(*app.Config)) (*host.Host, http.Handler) {
	t.Helper()
	log := zaptest.NewLogger(t).Named("host2")
	nc := h.connectSecond(t, log)
	cfg := app.Config{Config: host.Config{FunctionsDir: h.FnDir, DataDir: filepath.Join(h.Dir, "data2"), HostID: "test-2", AckWait: 5 * time.Second}, SecretsKey: h.Key}
	for _, f := range tweak {
		f(&cfg)
	}
	second, err := app.New(context.Background(), cfg, nc, log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	startSecond(t, second.Host)
	return second.Host, web.New(second.Web)
}

// AddEngineHost starts another engine host (jobs run by run, as in NewEngine) on the same NATS
// and functions, as a second machine, or this one restarted, would; it returns its log too.
func (h *H) AddEngineHost(t testing.TB, run host.Runner) (*host.Host, *observer.ObservedLogs) {
	t.Helper()
	observed, logs := observer.New(zap.DebugLevel)
	log := zap.New(zapcore.NewTee(zaptest.NewLogger(t).Named("host2").Core(), observed))
	nc := h.connectSecond(t, log)
	cfg := host.Config{FunctionsDir: h.FnDir, DataDir: filepath.Join(h.Dir, "data2"), HostID: "test-2", AckWait: 5 * time.Second, Runner: run, IDs: ids.NewKey(h.Key)}
	second, err := host.New(cfg, nc, log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	startSecond(t, second)
	return second, logs
}

// ConnectAs opens another connection to the server, as another host on another machine would
// (named name); the test's end closes it, and a test may close it first to make that host die.
func (h *H) ConnectAs(t testing.TB, name string) *nats.Conn {
	t.Helper()
	nc, err := bus.Connect(context.Background(), bus.ConnectOptions{URL: h.Srv.ClientURL(), Name: name}, zaptest.NewLogger(t).Named(name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func (h *H) connectSecond(t testing.TB, log *zap.Logger) *nats.Conn {
	t.Helper()
	nc, err := bus.Connect(context.Background(), bus.ConnectOptions{URL: h.Srv.ClientURL(), Name: "test-host-2"}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// startSecond starts a second host and stops it at the test's end.
func startSecond(t testing.TB, second *host.Host) {
	t.Helper()
	if err := second.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		second.Shutdown(ctx)
	})
}

// SetSecret stores a secret as `host secrets set` does.
func (h *H) SetSecret(name, value string) {
	h.t.Helper()
	js, err := jetstream.New(h.NC)
	if err != nil {
		h.t.Fatal(err)
	}
	st, err := secrets.Bind(context.Background(), js, h.Key)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := st.Set(context.Background(), name, json.RawMessage(value)); err != nil {
		h.t.Fatal(err)
	}
}

// ReadVolume reads one file of a volume's latest version, as `host volumes get` does.
func (h *H) ReadVolume(s3 *objstore.S3Config, name, path string) string {
	h.t.Helper()
	var out bytes.Buffer
	if err := h.volumes(s3).Get(context.Background(), name, 0, path, &out); err != nil {
		h.t.Fatalf("volume %s %s: %v", name, path, err)
	}
	return out.String()
}

// VolumeNames lists the volumes that have a committed version (in the JetStream store, or
// the S3 store s3 names).
func (h *H) VolumeNames(s3 *objstore.S3Config) []string {
	h.t.Helper()
	names, err := h.volumes(s3).List(context.Background())
	if err != nil {
		h.t.Fatalf("list volumes: %v", err)
	}
	return names
}

func (h *H) volumes(s3 *objstore.S3Config) *objstore.Volumes {
	h.t.Helper()
	ctx := context.Background()
	js, _ := jetstream.New(h.NC)
	v, err := objstore.Open(ctx, js, s3, objstore.Options{Log: zap.NewNop()})
	if err != nil {
		h.t.Fatal(err)
	}
	return v
}

// Main runs a test binary's tests. Packages that start a host use it as TestMain. (It once made
// the test binary the jail's init; the init is now a program of its own, package jailinit.)
func Main(m *testing.M) {
	os.Exit(m.Run())
}

// reuseAll gives a sandboxed function `reuse: <n>` when HOSTTEST_REUSE=<n> is set, so that a
// suite (the attack suites) runs in reused jails as it is: HOSTTEST_REUSE=5 go test
// ./test/system -run Attack. A function for which reuse: is refused (network: host, a volume
// named from $args, one that says reuse: already) is left as it is.
func reuseAll(content string) string {
	n := os.Getenv("HOSTTEST_REUSE")
	if n == "" || strings.Contains(content, "reuse:") || strings.Contains(content, "network: host") || strings.Contains(content, "$args[") {
		return content
	}
	for _, prefix := range []string{"# ", "// "} {
		if strings.Contains(content, prefix+"sandbox\n") {
			return strings.Replace(content, prefix+"sandbox\n", prefix+"sandbox\n"+prefix+"reuse: "+n+"\n", 1)
		}
	}
	return content
}
