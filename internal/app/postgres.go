package app

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/host"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/pgsource"
)

// Postgres configures the Postgres change source (serve --postgres); off when DSN is empty.
type Postgres struct {
	// DSN is the database whose tables functions follow with on: postgres:<table>.
	DSN string
	// Slot names the replication slot and the publication; pgsource.DefaultSlot when empty.
	Slot string
	// Retry is how often a host that waits for the slot (or for Postgres) tries again;
	// pgsource.DefaultRetry when zero.
	Retry time.Duration
}

// postgres is the change source of a host, nil without --postgres.
type postgres struct {
	src *pgsource.Source
}

// newPostgres makes the source and checks what waiting will not mend (the login, the database,
// wal_level, the role's right to replicate): serve refuses to start on those.
func newPostgres(ctx context.Context, cfg Config, nc *nats.Conn, msgIDs ids.Key, log *zap.Logger) (*postgres, error) {
	if cfg.Postgres.DSN == "" {
		return nil, nil
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("open JetStream: %w", err)
	}
	src, err := pgsource.New(pgsource.Config{DSN: cfg.Postgres.DSN, Slot: cfg.Postgres.Slot, HostID: cfg.HostID,
		JS: js, Stream: bus.RunStream, MsgID: msgIDs.Derive, Log: log.Named("postgres"), Retry: cfg.Postgres.Retry})
	if err != nil {
		return nil, err
	}
	if err := src.Check(ctx); err != nil {
		return nil, err
	}
	return &postgres{src: src}, nil
}

// served hands the tables of the functions about to be served to the source.
func (p *postgres) served(fns map[string]*functions.Function) {
	var on []string
	for _, f := range fns {
		on = append(on, f.Spec.On...)
	}
	p.src.Follow(annot.PostgresTables(on))
}

// run follows the tables until h shuts down, which waits for the slot to be let go, so that a
// host started next (or another host) can take it at once.
func (p *postgres) run(h *host.Host) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { p.src.Run(ctx) })
	h.AtShutdown(func() {
		cancel()
		wg.Wait()
	})
}
