// Package pgsource turns the changes of Postgres tables into triggers: `serve --postgres <dsn>`
// follows the tables that functions name with `on: postgres:<table> [insert|update|delete]`
// through logical replication (a publication and a replication slot, decoded by the pgoutput
// plugin, read with github.com/jackc/pglogrepl) and publishes each inserted, updated or deleted
// row to postgres.<schema>.<table>.<op> (annot.PostgresSubject), the subject such a function
// listens on, as the JSON object of Event.
//
// Nothing is lost and nothing runs twice: a transaction's changes are published with message
// ids derived from its place in the WAL, and its end is confirmed to Postgres (which then may
// forget it) only once JetStream has stored every one of them. A host that stops before that
// gets the transaction again from the slot when it (or another host) starts again, and the
// stream drops the copies it already holds as duplicates.
//
// One host at a time: a replication slot takes one consumer, and Postgres itself refuses a
// second one (SQLSTATE 55006). That refusal is the lease: every host given --postgres tries
// the slot, one streams, and the others say which host holds it and try again every
// Config.Retry, taking over within that time once the holder's connection ends.
package pgsource

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/annot"
)

// DefaultSlot names the replication slot and the publication when Config.Slot is empty.
const DefaultSlot = "agenthost"

// DefaultRetry is how long a host waits before it tries the slot (or Postgres) again.
const DefaultRetry = 5 * time.Second

// statusInterval is how often the confirmed position is sent while nothing happens, well within
// Postgres's wal_sender_timeout (60 s by default), past which it ends a silent consumer.
const statusInterval = 10 * time.Second

// Config configures a source.
type Config struct {
	// DSN is the Postgres connection string (serve --postgres), a URL or key=value pairs. Its
	// role needs the REPLICATION attribute, CREATE on the database (for the publication) and
	// ownership of the tables (to add them to it).
	DSN string
	// Slot names the replication slot and the publication; DefaultSlot when empty. Hosts that
	// share one NATS and one database share it.
	Slot string
	// HostID names this host to Postgres (application_name), so that a host waiting for the
	// slot can say which host holds it.
	HostID string
	// JS publishes the events; Stream is the trigger stream whose subjects say which changes a
	// function listens to (a change nobody listens to is not published).
	JS     jetstream.JetStream
	Stream string
	// MsgID derives a message id from its parts (ids.Key.Derive): the same on every host of a
	// cluster, so a change published again by another host is still deduplicated.
	MsgID func(parts ...string) string
	Log   *zap.Logger
	// Retry is how long between tries while the slot is held elsewhere or Postgres does not
	// answer; DefaultRetry when zero.
	Retry time.Duration
}

// Source follows the tables and publishes their changes. Run runs it; SetTables says which
// tables to follow.
type Source struct {
	cfg  Config
	conn *pgconn.Config // DSN parsed once: a DSN that cannot be parsed is refused by New

	// want holds the latest tables Follow was given, until Run checks them (SetTables).
	want chan []annot.PostgresTable

	// beforeConfirm, set by tests, runs once a transaction is stored, before it is confirmed;
	// an error ends the session there, as a host that dies at that moment would.
	beforeConfirm func() error

	mu      sync.Mutex
	tables  []annot.PostgresTable
	changed chan struct{} // closed and replaced when tables change
	status  Status
}

// Status is what the source is doing, for logs, tests and the operator.
type Status struct {
	// State is "idle" (no table to follow), "connecting", "waiting" (the slot is held by
	// another consumer: Holder), "streaming" or "error" (Err says what to do; it is tried
	// again).
	State  string
	Holder string
	Err    error
	// Confirmed is the last position confirmed to Postgres: every change before it is stored.
	Confirmed string
}

// New checks the DSN and returns a source; Run starts it.
func New(cfg Config) (*Source, error) {
	if cfg.Slot == "" {
		cfg.Slot = DefaultSlot
	}
	if !validSlot(cfg.Slot) {
		return nil, fmt.Errorf("postgres slot %q: a slot and publication name is lower-case letters, digits and _, at most 63; choose another --postgres-slot", cfg.Slot)
	}
	if cfg.Retry <= 0 {
		cfg.Retry = DefaultRetry
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	pc, err := pgconn.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("--postgres: the connection string cannot be read (write postgres://user:password@host:5432/db or \"host=... user=... dbname=...\"): %w", err)
	}
	return &Source{cfg: cfg, conn: pc, want: make(chan []annot.PostgresTable, 1), changed: make(chan struct{}), status: Status{State: "idle"}}, nil
}

// Status reports what the source is doing.
func (s *Source) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}

func (s *Source) setStatus(st Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status = st
}

// SetTables makes the source follow tables (those of every served function, annot.
// PostgresTables). A table Postgres does not have, or whose updates and deletes it could not
// publish, is left out with an error that says what to do; the others are followed. Tables are
// only ever added to the publication, never dropped from it: another host may still serve a
// function that follows one.
func (s *Source) SetTables(ctx context.Context, tables []annot.PostgresTable) []error {
	var errs []error
	var ok []annot.PostgresTable
	if len(tables) > 0 {
		conn, err := s.connect(ctx)
		if err != nil {
			// Followed unchecked: the session checks each before it adds it to the publication.
			s.cfg.Log.Error("postgres: cannot check the tables functions follow now; they are checked once Postgres answers", zap.Error(err))
			errs, ok = []error{err}, tables
			tables = nil
		} else {
			defer conn.Close(context.Background())
		}
		for _, t := range tables {
			if err := checkTable(ctx, conn, t); err != nil {
				s.cfg.Log.Error("postgres: a table an on: line names is not followed", zap.String("table", t.String()), zap.Error(err))
				errs = append(errs, err)
				continue
			}
			ok = append(ok, t)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.Equal(ok, s.tables) {
		s.tables = ok
		close(s.changed)
		s.changed = make(chan struct{})
	}
	return errs
}

func (s *Source) followed() ([]annot.PostgresTable, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tables, s.changed
}

// Follow has Run follow tables from now on (SetTables, in the background): it never blocks,
// so the host may call it while it holds its own locks. The latest call wins.
func (s *Source) Follow(tables []annot.PostgresTable) {
	for {
		select {
		case s.want <- tables:
			return
		default:
		}
		select {
		case <-s.want: // an older set not yet checked: replace it
		default:
		}
	}
}

// follow checks each set of tables Follow is given until ctx ends.
func (s *Source) follow(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case tables := <-s.want:
			s.SetTables(ctx, tables)
		}
	}
}

// Check connects once and checks what would never work however long the host waits: the
// credentials, the database, the role's REPLICATION attribute and wal_level. A Postgres that
// does not answer is not an error here: Run waits for it.
func (s *Source) Check(ctx context.Context) error {
	conn, err := s.connect(ctx)
	if err != nil {
		if fatal(err) {
			return err
		}
		s.cfg.Log.Warn("postgres: not reachable now; the host serves on and follows the tables once it is", zap.Error(err))
		return nil
	}
	defer conn.Close(context.Background())
	return checkServer(ctx, conn)
}

// Run follows the tables until ctx ends: it waits for a table to follow, takes the slot (or
// waits for it) and streams; on any error it says so and starts again from the slot.
func (s *Source) Run(ctx context.Context) {
	go s.follow(ctx)
	for ctx.Err() == nil {
		tables, changed := s.followed()
		if len(tables) == 0 {
			s.setStatus(Status{State: "idle"})
			select {
			case <-ctx.Done():
				return
			case <-changed:
				continue
			}
		}
		err := s.session(ctx)
		if ctx.Err() != nil {
			return
		}
		var held *slotHeldError
		switch {
		case errors.As(err, &held):
			if s.Status().State != "waiting" || s.Status().Holder != held.holder {
				s.cfg.Log.Warn("postgres: the replication slot is held by another consumer; this host waits and takes it over once it is free",
					zap.String("slot", s.cfg.Slot), zap.String("holder", held.holder), zap.Duration("retry", s.cfg.Retry))
			}
			s.setStatus(Status{State: "waiting", Holder: held.holder, Err: err})
		case err != nil:
			// Said once per cause: a Postgres that stays down would otherwise fill the log.
			if prev := s.Status(); prev.State != "error" || prev.Err == nil || prev.Err.Error() != err.Error() {
				s.cfg.Log.Error("postgres: following the tables stopped; it starts again from the slot, nothing is lost", zap.Duration("retry", s.cfg.Retry), zap.Error(err))
			}
			s.setStatus(Status{State: "error", Err: err})
		}
		t := time.NewTimer(s.cfg.Retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
