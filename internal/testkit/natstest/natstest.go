// Package natstest is what the tests of packages that talk to NATS share: an embedded
// nats-server with JetStream for one test, and waiting for a condition that has no event to wait
// on.
package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/testkit/testwait"
)

// Server starts an embedded nats-server with JetStream as `host serve` starts its own
// (bus.StartServer), on a free loopback port unless cfg.Listen says otherwise, and shuts it down
// at the test's end. It is for tests that need the server itself (its URL, a restart, a
// configuration of their own); Start is the common case.
func Server(t testing.TB, cfg bus.ServerConfig, log *zap.Logger) *server.Server {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:-1"
	}
	srv, err := bus.StartServer(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// Start starts an embedded nats-server with JetStream on a free loopback port (Server) and
// connects to it; both end with the test. JetStream fsyncs lazily: a test is not about
// surviving power loss, and `always` makes suites slow.
func Start(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	srv := Server(t, bus.ServerConfig{StoreDir: t.TempDir(), SyncInterval: time.Minute}, zap.NewNop())
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatalf("connect to the test's nats-server: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("open JetStream: %v", err)
	}
	return nc, js
}

// Poll looks at cond until it holds or within passes, and reports whether it held. It is for
// things with no event to wait on; within is a bound on a failure, not the expected time.
func Poll(within time.Duration, cond func() bool) bool {
	return testwait.Poll(within, testwait.Cond(cond)) == nil
}

// EventuallyWithin is how long Eventually waits.
const EventuallyWithin = testwait.Within

// Eventually waits until cond holds, failing the test, with what, if it has not within
// EventuallyWithin. A wait with a state worth reporting uses testwait.For.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, what, EventuallyWithin, testwait.Cond(cond))
}
