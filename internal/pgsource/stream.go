package pgsource

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/bus"
)

// stream is one replication session: what it has read and confirmed.
type stream struct {
	s         *Source
	repl      *pgconn.PgConn
	relations map[uint32]*pglogrepl.RelationMessage
	// confirmed is the position Postgres may forget up to: every change before it is stored.
	confirmed pglogrepl.LSN
	txn       *txn // the transaction being read; nil between transactions
	// captured are the trigger stream's subjects, read again when a change's subject is not
	// among them (a function that started listening since).
	captured   []string
	capturedAt time.Time
}

// txn is a transaction being published: its changes' acks are awaited at its commit.
type txn struct {
	xid        uint32
	final      pglogrepl.LSN
	commitTime time.Time
	n          int // changes seen, published or not: the index in the message id
	pending    []jetstream.PubAckFuture
	published  int
}

// session takes the slot and streams until an error or the end of ctx.
func (s *Source) session(ctx context.Context) error {
	s.setStatus(Status{State: "connecting"})
	conn, err := s.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if err := checkServer(ctx, conn); err != nil {
		return err
	}
	tables, changed := s.followed()
	if err := s.ensurePublication(ctx, conn, tables); err != nil {
		return err
	}
	repl, err := s.replicate(ctx)
	if err != nil {
		return err
	}
	defer repl.Close(context.Background())
	if err := s.ensureSlot(ctx, conn, repl); err != nil {
		return err
	}
	st := &stream{s: s, repl: repl, relations: map[uint32]*pglogrepl.RelationMessage{}}
	_ = conn.QueryRow(ctx, "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = $1", s.cfg.Slot).Scan(&st.confirmed)
	err = pglogrepl.StartReplication(ctx, repl, s.cfg.Slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + s.cfg.Slot + "'"}})
	if isCode(err, "55006") {
		return &slotHeldError{holder: s.holder(ctx, conn), err: err}
	}
	if err != nil {
		return fmt.Errorf("postgres: start replication from slot %s: %w", s.cfg.Slot, err)
	}
	s.cfg.Log.Info("postgres: following tables from the replication slot", zap.String("slot", s.cfg.Slot),
		zap.Stringer("from", st.confirmed), zap.Strings("tables", names(tables)))
	s.setStatus(Status{State: "streaming", Confirmed: st.confirmed.String()})
	for {
		select {
		case <-changed:
			tables, changed = s.followed()
			if err := s.ensurePublication(ctx, conn, tables); err != nil {
				return err
			}
			s.cfg.Log.Info("postgres: following tables", zap.Strings("tables", names(tables)))
		default:
		}
		if err := st.receive(ctx); err != nil {
			return err
		}
	}
}

// receive handles one message, or sends the confirmed position when none came for a while.
func (st *stream) receive(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, statusInterval)
	raw, err := st.repl.ReceiveMessage(rctx)
	cancel()
	if err != nil {
		if pgconn.Timeout(err) && ctx.Err() == nil {
			return st.confirm(ctx)
		}
		return fmt.Errorf("postgres: read from the replication slot: %w", err)
	}
	switch m := raw.(type) {
	case *pgproto3.ErrorResponse:
		return fmt.Errorf("postgres: replication: %w", pgconn.ErrorResponseToPgError(m))
	case *pgproto3.CopyData:
		if len(m.Data) == 0 {
			return nil
		}
		switch m.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			k, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
			if err != nil {
				return fmt.Errorf("postgres: read a keepalive: %w", err)
			}
			// Everything before ServerWALEnd has been sent, and between transactions all of it
			// is stored: confirming it lets Postgres drop WAL of tables nobody follows.
			if st.txn == nil && k.ServerWALEnd > st.confirmed {
				st.confirmed = k.ServerWALEnd
			}
			if k.ReplyRequested {
				return st.confirm(ctx)
			}
		case pglogrepl.XLogDataByteID:
			x, err := pglogrepl.ParseXLogData(m.Data[1:])
			if err != nil {
				return fmt.Errorf("postgres: read WAL data: %w", err)
			}
			return st.handle(ctx, x)
		}
	}
	return nil
}

// confirm tells Postgres the position up to which every change is stored.
func (st *stream) confirm(ctx context.Context) error {
	if err := pglogrepl.SendStandbyStatusUpdate(ctx, st.repl, pglogrepl.StandbyStatusUpdate{WALWritePosition: st.confirmed}); err != nil {
		return fmt.Errorf("postgres: confirm position %s: %w", st.confirmed, err)
	}
	st.s.mu.Lock()
	st.s.status.Confirmed = st.confirmed.String()
	st.s.mu.Unlock()
	return nil
}

// handle reads one pgoutput message.
func (st *stream) handle(ctx context.Context, x pglogrepl.XLogData) error {
	msg, err := pglogrepl.Parse(x.WALData)
	if err != nil {
		return fmt.Errorf("postgres: decode a pgoutput message at %s: %w", x.WALStart, err)
	}
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		st.relations[m.RelationID] = m
	case *pglogrepl.BeginMessage:
		st.txn = &txn{xid: m.Xid, final: m.FinalLSN, commitTime: m.CommitTime}
	case *pglogrepl.InsertMessage:
		return st.change(ctx, x.WALStart, m.RelationID, "insert", m.Tuple, 0, nil)
	case *pglogrepl.UpdateMessage:
		return st.change(ctx, x.WALStart, m.RelationID, "update", m.NewTuple, m.OldTupleType, m.OldTuple)
	case *pglogrepl.DeleteMessage:
		return st.change(ctx, x.WALStart, m.RelationID, "delete", nil, m.OldTupleType, m.OldTuple)
	case *pglogrepl.CommitMessage:
		return st.commit(ctx, m)
	}
	return nil
}

// Event is the JSON a change is published as: the arguments of the function it starts.
type Event struct {
	Schema string `json:"schema"`
	Table  string `json:"table"`
	Op     string `json:"op"`
	// Row is the new row (insert, update); null for a delete.
	Row map[string]any `json:"row"`
	// Old holds the old row where Postgres sends it (REPLICA IDENTITY FULL), else its key:
	// the primary key's columns; null for an insert.
	Old        map[string]any `json:"old"`
	LSN        string         `json:"lsn"`
	Xid        uint32         `json:"xid"`
	CommitTime time.Time      `json:"commit_time"`
}

// change publishes one row change, unless no function listens to its subject.
func (st *stream) change(ctx context.Context, at pglogrepl.LSN, relID uint32, op string, row *pglogrepl.TupleData, oldType uint8, old *pglogrepl.TupleData) error {
	t := st.txn
	if t == nil {
		return fmt.Errorf("postgres: a %s at %s outside a transaction", op, at)
	}
	t.n++
	rel, ok := st.relations[relID]
	if !ok {
		return fmt.Errorf("postgres: a %s at %s names relation %d, which the stream did not describe", op, at, relID)
	}
	subject := annot.PostgresSubject(rel.Namespace, rel.RelationName, op)
	listened, err := st.listened(ctx, subject)
	if err != nil || !listened {
		return err
	}
	ev := Event{Schema: rel.Namespace, Table: rel.RelationName, Op: op, LSN: at.String(), Xid: t.xid, CommitTime: t.commitTime.UTC()}
	if row != nil {
		ev.Row = decodeTuple(rel, row, false)
	}
	switch {
	case old != nil:
		ev.Old = decodeTuple(rel, old, oldType == pglogrepl.UpdateMessageTupleTypeKey)
	case op == "update":
		ev.Old = decodeTuple(rel, row, true) // the key did not change: it is the new row's
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("postgres: encode the %s of %s.%s at %s: %w", op, rel.Namespace, rel.RelationName, at, err)
	}
	m := nats.NewMsg(subject)
	m.Data = data
	// The same on every host and every replay of this transaction: a change published again
	// after a restart is dropped by the stream as a duplicate.
	m.Header.Set(bus.HeaderMsgID, st.s.cfg.MsgID("postgres", st.s.cfg.Slot, t.final.String(), strconv.Itoa(t.n)))
	f, err := st.s.cfg.JS.PublishMsgAsync(m)
	if err != nil {
		return fmt.Errorf("postgres: publish the %s of %s.%s at %s to %s: %w", op, rel.Namespace, rel.RelationName, at, subject, err)
	}
	t.pending = append(t.pending, f)
	t.published++
	if len(t.pending) >= maxPending {
		return st.stored(ctx, t) // a large transaction: bound what is in flight
	}
	return nil
}

// maxPending bounds the changes in flight to JetStream, well below the client's own bound on
// asynchronous publishes, past which it refuses them.
const maxPending = 1000

// stored waits until JetStream has stored every change of t published so far.
func (st *stream) stored(ctx context.Context, t *txn) error {
	for _, f := range t.pending {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("postgres: JetStream did not store a change of transaction %d (it is published again from the slot): %w", t.xid, err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	t.pending = t.pending[:0]
	return nil
}

// listened reports whether the trigger stream takes subject, that is whether a function
// listens to it.
func (st *stream) listened(ctx context.Context, subject string) (bool, error) {
	match := func() bool {
		return slices.ContainsFunc(st.captured, func(p string) bool { return bus.SubjectMatches(p, subject) })
	}
	if match() || time.Since(st.capturedAt) < time.Second {
		return match(), nil
	}
	stream, err := st.s.cfg.JS.Stream(ctx, st.s.cfg.Stream)
	if err != nil {
		return false, fmt.Errorf("postgres: read the subjects of stream %s: %w", st.s.cfg.Stream, err)
	}
	st.captured, st.capturedAt = stream.CachedInfo().Config.Subjects, time.Now()
	return match(), nil
}

// commit waits until JetStream has stored every change of the transaction, then confirms its
// end to Postgres: only then may Postgres forget it.
func (st *stream) commit(ctx context.Context, m *pglogrepl.CommitMessage) error {
	t := st.txn
	if t == nil {
		return fmt.Errorf("postgres: a commit at %s outside a transaction", m.CommitLSN)
	}
	if err := st.stored(ctx, t); err != nil {
		return err
	}
	if st.s.beforeConfirm != nil {
		if err := st.s.beforeConfirm(); err != nil {
			return err
		}
	}
	st.txn = nil
	st.confirmed = m.TransactionEndLSN
	if t.published > 0 {
		st.s.cfg.Log.Debug("postgres: transaction stored", zap.Uint32("xid", t.xid), zap.Int("changes", t.published), zap.Stringer("lsn", m.CommitLSN))
	}
	return st.confirm(ctx)
}

func names(tables []annot.PostgresTable) []string {
	out := make([]string, len(tables))
	for i, t := range tables {
		out[i] = t.String()
	}
	return out
}
