package bus_test

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
	"github.com/agenthost/host/internal/testkit/natstest"
)

// smallServer is an embedded server whose JetStream may store 64 MiB on disk.
func smallServer(t *testing.T) jetstream.JetStream {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats.conf")
	body := "listen: 127.0.0.1:-1\njetstream { store_dir: " + filepath.Join(dir, "js") + ", max_file_store: 64MB, max_memory_store: 16MB }\n"
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := natstest.Server(t, bus.ServerConfig{ConfigFile: conf}, zap.NewNop())
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// A store limit the server refuses is an error at start, with the server's reason; a name that
// is no store, and an age on a bucket, too. A limit the server takes is set.
func TestStoreLimits(t *testing.T) {
	js := smallServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "agent_kv"}); err != nil {
		t.Fatal(err)
	}
	lim := func(name string, bytes int64, age time.Duration) bus.StreamOptions {
		return bus.StreamOptions{Limits: map[string]bus.StoreLimit{name: {Bytes: bytes, Age: age}}}
	}
	cases := []struct {
		name    string
		apply   func() error
		wantErr string // "" : accepted
	}{
		{"results stream over the server's store", func() error {
			_, err := bus.EnsureResultStream(ctx, js, lim(bus.ResultStream, 1<<30, 0))
			return err
		}, "insufficient storage"},
		{"trigger stream over the server's store", func() error {
			_, err := bus.EnsureRunStream(ctx, js, nil, lim(bus.RunStream, 1<<30, 0))
			return err
		}, "insufficient storage"},
		{"bucket over the server's store", func() error {
			return bus.ApplyStoreLimits(ctx, js, map[string]bus.StoreLimit{"agent_kv": {Bytes: 1 << 30}})
		}, "insufficient storage"},
		{"no such store", func() error {
			return bus.ApplyStoreLimits(ctx, js, map[string]bus.StoreLimit{"agent_kb": {Bytes: 1 << 20}})
		}, "no such stream, KV bucket or object store; the host's are [agent_kv"},
		{"an age on a bucket", func() error {
			return bus.ApplyStoreLimits(ctx, js, map[string]bus.StoreLimit{"agent_kv": {Bytes: 1 << 20, Age: time.Hour}})
		}, "an age applies to the host's streams"},
		{"results stream within it", func() error {
			_, err := bus.EnsureResultStream(ctx, js, lim(bus.ResultStream, 8<<20, 48*time.Hour))
			return err
		}, ""},
		{"trigger stream within it", func() error {
			_, err := bus.EnsureRunStream(ctx, js, nil, lim(bus.RunStream, 8<<20, 0))
			return err
		}, ""},
		{"bucket within it", func() error {
			return bus.ApplyStoreLimits(ctx, js, map[string]bus.StoreLimit{"agent_kv": {Bytes: 1 << 20}})
		}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.apply()
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("got %v, want an error saying %q", err, c.wantErr)
			}
		})
	}
	for stream, want := range map[string]int64{bus.ResultStream: 8 << 20, bus.RunStream: 8 << 20, "KV_agent_kv": 1 << 20} {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.CachedInfo().Config; got.MaxBytes != want {
			t.Errorf("%s: max bytes %d, want %d", stream, got.MaxBytes, want)
		}
	}
	s, _ := js.Stream(ctx, bus.RunStream)
	if cfg := s.CachedInfo().Config; cfg.Discard != jetstream.DiscardNew {
		t.Errorf("the trigger stream discards %v when full; want new: a trigger accepted is never dropped for a newer one", cfg.Discard)
	}
	s, _ = js.Stream(ctx, bus.ResultStream)
	if cfg := s.CachedInfo().Config; cfg.MaxAge != 48*time.Hour {
		t.Errorf("results stream max age %s, want 48h", cfg.MaxAge)
	}
}
