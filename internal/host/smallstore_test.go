package host_test

// Issue 37, item 6: a host starts on a small disk. The embedded server reserves the max bytes
// of every file stream against its store (max_file_store, by default 75% of the free disk), so
// the host's default limits (AGENT_RESULTS and AGENT_LOGS 1 GiB each) did not fit a 1.2 GB
// store: `serve` exited with "insufficient storage resources", naming no flag.

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/host"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// smallStore starts an embedded server whose JetStream store holds maxStore bytes and a host on
// it, as `serve` builds one (its store watched), and returns the host, its Start's error and
// its log.
func smallStore(t *testing.T, maxStore int64, limits map[string]bus.StoreLimit) (*host.Host, jetstream.JetStream, error, *observer.ObservedLogs) {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "functions"), 0o755); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	log := zap.New(core)
	srv := natstest.Server(t, bus.ServerConfig{StoreDir: filepath.Join(dir, "nats"), SyncInterval: time.Minute, MaxStore: maxStore}, log)
	nc, err := bus.Connect(context.Background(), bus.ConnectOptions{InProcess: srv, Name: "small-store"}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	store, err := bus.NewEmbeddedStore(srv)
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.New(host.Config{FunctionsDir: filepath.Join(dir, "functions"), DataDir: filepath.Join(dir, "data"), HostID: "small",
		Runner: hosttest.NewRuns(), Store: store, Streams: bus.StreamOptions{Limits: limits}}, nc, log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	err = h.Start(context.Background())
	if err == nil {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			h.Shutdown(ctx)
		})
	}
	js, _ := jetstream.New(nc)
	return h, js, err, logs
}

// On a 1.2 GB store the host starts, sizes its streams' defaults to it (and says so), and
// leaves room for what is not reserved: triggers, records, volumes.
func TestHostStartsOnASmallStore(t *testing.T) {
	const maxStore = 1200 * 1000 * 1000
	_, js, err, logs := smallStore(t, maxStore, nil)
	if err != nil {
		t.Fatalf("the host did not start on a %d-byte store: %v", maxStore, err)
	}
	var reserved int64
	for _, name := range append(cloneNames(bus.HostStreams), "KV_"+jobs.Bucket, "KV_agent_flow_jobs", "KV_agent_joins") {
		s, err := js.Stream(context.Background(), name)
		if err != nil {
			t.Fatalf("store %s: %v", name, err)
		}
		if b := s.CachedInfo().Config.MaxBytes; b > 0 {
			reserved += b
		}
	}
	if reserved > maxStore/2 {
		t.Fatalf("the host's stores reserve %d bytes of the %d-byte store; want at most half, the rest for triggers, records and volumes", reserved, maxStore)
	}
	sized := logs.FilterMessageSnippet("sized").All()
	if len(sized) != 1 {
		t.Fatalf("want one log line saying how the stores were sized; got %v", sized)
	}
	fields := sized[0].ContextMap()
	for _, k := range []string{bus.ResultStream, bus.LogStream, "max_file_store"} {
		if _, ok := fields[k]; !ok {
			t.Fatalf("the sizing log %q %v does not name %s", sized[0].Message, fields, k)
		}
	}
	// A publish into a sized stream is stored.
	if _, err := js.Publish(context.Background(), bus.LogsPrefix+"x.y", []byte("line")); err != nil {
		t.Fatalf("a log line on the small store: %v", err)
	}
}

// A store too small for even the minimums is refused, naming the --store-limit values that fit;
// started with them, the host starts.
func TestHostRefusesAStoreTooSmallNamingTheLimits(t *testing.T) {
	const maxStore = 100 << 20
	_, _, err, _ := smallStore(t, maxStore, nil)
	if err == nil || !strings.Contains(err.Error(), "--store-limit AGENT_RESULTS=") || !strings.Contains(err.Error(), "--store-limit AGENT_LOGS=") {
		t.Fatalf("start on a %d-byte store: %v; want a refusal naming the --store-limit values that fit", maxStore, err)
	}
	var limits = map[string]bus.StoreLimit{}
	for _, f := range strings.Fields(err.Error()) {
		if spec, ok := strings.CutPrefix(f, "AGENT_"); ok && strings.Contains(spec, "=") {
			name, l, perr := host.ParseStoreLimit("AGENT_" + strings.TrimRight(spec, ",;.)"))
			if perr != nil {
				t.Fatalf("the refusal's value %q: %v", f, perr)
			}
			limits[name] = l
		}
	}
	if len(limits) != 2 {
		t.Fatalf("the refusal %q names %v; want AGENT_RESULTS and AGENT_LOGS", err, limits)
	}
	if _, _, err, _ := smallStore(t, maxStore, limits); err != nil {
		t.Fatalf("started with the limits the refusal named (%v): %v", limits, err)
	}
}

func cloneNames(s []string) []string { return append([]string(nil), s...) }
