package bus

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// A bucket opened while JetStream answers nothing (here: its server restarting) is opened once
// the server is back; an answer, a refusal included, is returned at once.
func TestPatientWaitsForJetStreamToAnswer(t *testing.T) {
	dir := t.TempDir()
	start := func(listen string) *server.Server {
		srv, err := StartServer(ServerConfig{Listen: listen, StoreDir: dir, SyncInterval: time.Minute}, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Shutdown)
		return srv
	}
	srv := start("127.0.0.1:-1")
	addr := srv.Addr().String()
	nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	raw, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	js := Patient(raw, zap.New(core))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// An answer is not retried: a missing bucket is said at once, with nothing logged.
	if _, err := js.KeyValue(ctx, "missing"); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("look up a missing bucket: %v; want bucket not found", err)
	}
	if n := logs.Len(); n != 0 {
		t.Fatalf("a lookup JetStream answered logged %d lines: %v", n, logs.All())
	}

	// The server goes away and comes back while the bucket is being opened.
	srv.Shutdown()
	srv.WaitForShutdown()
	opened := make(chan error, 1)
	go func() {
		_, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "leases"})
		opened <- err
	}()
	// Back once the open has met the silence and said so.
	waitFor(t, func() bool { return logs.FilterMessageSnippet("does not answer yet").Len() > 0 })
	start(addr)
	if err := <-opened; err != nil {
		t.Fatalf("open a bucket across a server restart: %v; want it opened once the server answers", err)
	}
	if logs.FilterMessage("JetStream answered").Len() != 1 {
		t.Errorf("no line says JetStream answered after the wait: %v", logs.All())
	}

}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
