package pgsource

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/annot"
)

var slotName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

func validSlot(s string) bool { return slotName.MatchString(s) }

// connectTimeout bounds one connection attempt when the DSN sets none.
const connectTimeout = 15 * time.Second

// where names the server and database of the DSN, never its password.
func (s *Source) where() string {
	return fmt.Sprintf("%s:%d database %q as %q", s.conn.Host, s.conn.Port, s.conn.Database, s.conn.User)
}

// connect opens a plain connection.
func (s *Source) connect(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(s.cfg.DSN)
	if err != nil {
		return nil, err // New parsed it already
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = connectTimeout
	}
	cfg.RuntimeParams["application_name"] = s.appName()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, s.connectError(err)
	}
	return conn, nil
}

// replicate opens a replication connection (replication=database).
func (s *Source) replicate(ctx context.Context) (*pgconn.PgConn, error) {
	cfg := s.conn.Copy()
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = connectTimeout
	}
	cfg.RuntimeParams["replication"] = "database"
	cfg.RuntimeParams["application_name"] = s.appName()
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, s.connectError(err)
	}
	return conn, nil
}

func (s *Source) appName() string { return "host " + s.cfg.HostID }

func (s *Source) connectError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "28P01", "28000":
			return &fatalError{fmt.Errorf("postgres: %s refuses the login: %w; check the user and password in --postgres", s.where(), err)}
		case "3D000":
			return &fatalError{fmt.Errorf("postgres: %s: the database does not exist: %w; name an existing one in --postgres (or create it)", s.where(), err)}
		}
	}
	return fmt.Errorf("postgres: cannot connect to %s: %w; check the host and port in --postgres and that Postgres runs there", s.where(), err)
}

// fatalError is what waiting will not mend: serve refuses to start on it.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }

func fatal(err error) bool {
	var f *fatalError
	return errors.As(err, &f)
}

// slotHeldError says the slot is held by another consumer: another host, most likely.
type slotHeldError struct {
	holder string
	err    error
}

func (e *slotHeldError) Error() string {
	return fmt.Sprintf("replication slot is held by %s (a replication slot takes one consumer); this host waits and takes it over once it is free: %v", e.holder, e.err)
}
func (e *slotHeldError) Unwrap() error { return e.err }

// checkServer checks wal_level and the role's REPLICATION attribute.
func checkServer(ctx context.Context, conn *pgx.Conn) error {
	var level string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
		return fmt.Errorf("postgres: read wal_level: %w", err)
	}
	if level != "logical" {
		return &fatalError{fmt.Errorf("postgres: wal_level is %q, and following tables takes logical replication: run `ALTER SYSTEM SET wal_level = logical` (or set it in postgresql.conf) and restart Postgres", level)}
	}
	var repl, super bool
	var role string
	if err := conn.QueryRow(ctx, "SELECT rolname, rolreplication, rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&role, &repl, &super); err != nil {
		return fmt.Errorf("postgres: read the role's attributes: %w", err)
	}
	if !repl && !super {
		return &fatalError{fmt.Errorf("postgres: role %q may not replicate: run `ALTER ROLE %s REPLICATION`, or give --postgres a role that may", role, role)}
	}
	return nil
}

// checkTable checks that t exists and that Postgres can publish its updates and deletes: a
// published table without a replica identity would have them refused.
func checkTable(ctx context.Context, conn *pgx.Conn, t annot.PostgresTable) error {
	var ident string
	var keyed bool
	err := conn.QueryRow(ctx, `SELECT c.relreplident::text,
		EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND (i.indisprimary OR i.indisreplident))
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')`, t.Schema, t.Table).Scan(&ident, &keyed)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("postgres: table %s does not exist in database %q: create it, or fix the on: postgres: line that names it", t, conn.Config().Database)
	}
	if err != nil {
		return fmt.Errorf("postgres: look up table %s: %w", t, err)
	}
	if ident == "n" || (ident == "d" && !keyed) {
		return fmt.Errorf("postgres: table %s has no primary key, and once published Postgres would refuse its UPDATEs and DELETEs: add a primary key, or run `ALTER TABLE %s REPLICA IDENTITY FULL`", t, t)
	}
	return nil
}

// ensurePublication makes the publication hold every table in tables (adding, never dropping).
func (s *Source) ensurePublication(ctx context.Context, conn *pgx.Conn, tables []annot.PostgresTable) error {
	pub := pgx.Identifier{s.cfg.Slot}.Sanitize()
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)", s.cfg.Slot).Scan(&exists); err != nil {
		return fmt.Errorf("postgres: look up publication %s: %w", s.cfg.Slot, err)
	}
	if !exists {
		_, err := conn.Exec(ctx, "CREATE PUBLICATION "+pub+" WITH (publish = 'insert, update, delete')")
		if err != nil && !isCode(err, "42710") { // another host made it meanwhile
			return fmt.Errorf("postgres: create publication %s: %w; the role needs CREATE on the database", s.cfg.Slot, err)
		}
	}
	rows, err := conn.Query(ctx, "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = $1", s.cfg.Slot)
	if err != nil {
		return fmt.Errorf("postgres: list the tables of publication %s: %w", s.cfg.Slot, err)
	}
	have := map[annot.PostgresTable]bool{}
	for rows.Next() {
		var t annot.PostgresTable
		if err := rows.Scan(&t.Schema, &t.Table); err != nil {
			return err
		}
		have[t] = true
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, t := range tables {
		if have[t] {
			continue
		}
		if err := checkTable(ctx, conn, t); err != nil {
			s.cfg.Log.Error("postgres: a table an on: line names is not followed", zap.String("table", t.String()), zap.Error(err))
			continue
		}
		_, err := conn.Exec(ctx, "ALTER PUBLICATION "+pub+" ADD TABLE "+pgx.Identifier{t.Schema, t.Table}.Sanitize())
		if err != nil && !isCode(err, "42710") {
			return fmt.Errorf("postgres: add table %s to publication %s: %w; the role must own the table", t, s.cfg.Slot, err)
		}
	}
	return nil
}

// ensureSlot creates the replication slot unless it exists. A new slot starts at the present:
// changes made before it existed are not delivered.
func (s *Source) ensureSlot(ctx context.Context, conn *pgx.Conn, repl *pgconn.PgConn) error {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)", s.cfg.Slot).Scan(&exists); err != nil {
		return fmt.Errorf("postgres: look up replication slot %s: %w", s.cfg.Slot, err)
	}
	if exists {
		return nil
	}
	_, err := pglogrepl.CreateReplicationSlot(ctx, repl, s.cfg.Slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "NOEXPORT_SNAPSHOT"})
	if err != nil && !isCode(err, "42710") {
		return fmt.Errorf("postgres: create replication slot %s: %w", s.cfg.Slot, err)
	}
	if err == nil {
		s.cfg.Log.Info("postgres: replication slot created; changes from now on are delivered")
	}
	return nil
}

// holder says who holds the slot: the host's name when a host does.
func (s *Source) holder(ctx context.Context, conn *pgx.Conn) string {
	var pid *int32
	var app *string
	err := conn.QueryRow(ctx, `SELECT s.active_pid, a.application_name FROM pg_replication_slots s
		LEFT JOIN pg_stat_activity a ON a.pid = s.active_pid WHERE s.slot_name = $1`, s.cfg.Slot).Scan(&pid, &app)
	switch {
	case err != nil || pid == nil:
		return "another consumer"
	case app != nil && strings.HasPrefix(*app, "host "):
		return fmt.Sprintf("host %s (Postgres pid %d)", strings.TrimPrefix(*app, "host "), *pid)
	case app != nil && *app != "":
		return fmt.Sprintf("%q (Postgres pid %d)", *app, *pid)
	}
	return fmt.Sprintf("Postgres pid %d", *pid)
}

func isCode(err error, code string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == code
}
