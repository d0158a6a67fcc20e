package hosttest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/host"
)

// Kill cuts the host New started off NATS at once, as its machine dying would: nothing is
// withdrawn, settled or released; its jobs' messages go to another host after the ack wait.
// The user's connection (NC, Store) stays.
func (h *H) Kill() { h.hostConn.Close() }

// AddKillableHost is AddHost, named id, that also returns what cuts it off NATS as Kill does.
func (h *H) AddKillableHost(t testing.TB, id string, tweak ...func(*app.Config)) (*host.Host, func()) {
	t.Helper()
	nc := h.ConnectAs(t, id)
	cfg := app.Config{Config: host.Config{FunctionsDir: h.FnDir, DataDir: filepath.Join(h.Dir, "data-"+id), HostID: id, AckWait: 5 * time.Second}, SecretsKey: h.Key}
	for _, f := range tweak {
		f(&cfg)
	}
	built, err := app.New(context.Background(), cfg, nc, zaptest.NewLogger(t).Named(id), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	startSecond(t, built.Host)
	return built.Host, nc.Close
}
