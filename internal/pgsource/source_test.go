package pgsource_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap/zaptest"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/pgsource"
	"github.com/agenthost/host/internal/testkit/natstest"
	"github.com/agenthost/host/internal/testkit/pgtest"
)

const testStream = "PGTEST"

// env is a real Postgres with a table orders, and a real NATS with a stream that keeps every
// change of it (the host's trigger stream keeps them until consumed; this one for reading).
type env struct {
	t   *testing.T
	pg  *pgtest.Cluster
	js  jetstream.JetStream
	key ids.Key
}

func newEnv(t *testing.T) *env {
	pg := pgtest.Start(t)
	pg.MustPsql(t, "", "CREATE TABLE orders (id int PRIMARY KEY, item text, qty int, price numeric, meta jsonb)")
	_, js := natstest.Start(t)
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: testStream, Subjects: []string{"postgres.public.orders.>"}, Duplicates: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, pg: pg, js: js, key: ids.NewKey([]byte("test key"))}
}

// source makes a source named hostID that follows orders.
func (e *env) source(hostID string, tweak ...func(*pgsource.Config)) *pgsource.Source {
	cfg := pgsource.Config{DSN: e.pg.DSN(""), HostID: hostID, JS: e.js, Stream: testStream, MsgID: e.key.Derive,
		Log: zaptest.NewLogger(e.t).Named(hostID), Retry: 200 * time.Millisecond}
	for _, f := range tweak {
		f(&cfg)
	}
	s, err := pgsource.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := s.Check(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	if errs := s.SetTables(context.Background(), []annot.PostgresTable{{Schema: "public", Table: "orders"}}); len(errs) > 0 {
		e.t.Fatal(errs)
	}
	return s
}

// run runs s until the returned stop is called (or the test ends); stop waits for it to end.
func run(t *testing.T, s *pgsource.Source) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { s.Run(ctx) })
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	natstest.Eventually(t, "the source streams", func() bool { return s.Status().State == "streaming" })
	return stop
}

// events reads every change the stream holds, in order.
func (e *env) events() []pgsource.Event {
	ctx := context.Background()
	c, err := e.js.OrderedConsumer(ctx, testStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []pgsource.Event
	for range info.NumPending {
		m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			e.t.Fatal(err)
		}
		var ev pgsource.Event
		if err := json.Unmarshal(m.Data(), &ev); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, ev)
	}
	return out
}

func (e *env) waitEvents(n int) []pgsource.Event {
	e.t.Helper()
	var got []pgsource.Event
	natstest.Eventually(e.t, fmt.Sprintf("%d changes in the stream", n), func() bool {
		got = e.events()
		return len(got) >= n
	})
	return got
}

func TestChanges(t *testing.T) {
	e := newEnv(t)
	run(t, e.source("a"))
	e.pg.MustPsql(t, "", `INSERT INTO orders VALUES (1, 'tea', 2, 3.50, '{"gift": true}')`)
	e.pg.MustPsql(t, "", `UPDATE orders SET qty = 3 WHERE id = 1`)
	e.pg.MustPsql(t, "", `DELETE FROM orders WHERE id = 1`)
	got := e.waitEvents(3)
	if len(got) != 3 {
		t.Fatalf("got %d changes, want 3: %+v", len(got), got)
	}
	ins, upd, del := got[0], got[1], got[2]
	if ins.Op != "insert" || ins.Table != "orders" || ins.Schema != "public" || ins.Old != nil {
		t.Errorf("insert = %+v", ins)
	}
	row, _ := json.Marshal(ins.Row)
	if want := `{"id":1,"item":"tea","meta":{"gift":true},"price":"3.50","qty":2}`; string(row) != want {
		t.Errorf("inserted row = %s, want %s", row, want)
	}
	if upd.Op != "update" || upd.Row["qty"] != float64(3) || upd.Old["id"] != float64(1) || len(upd.Old) != 1 {
		t.Errorf("update = %+v, want qty 3 and old {id: 1}", upd)
	}
	if del.Op != "delete" || del.Row != nil || del.Old["id"] != float64(1) {
		t.Errorf("delete = %+v, want no row and old {id: 1}", del)
	}
	for _, ev := range got {
		if ev.LSN == "" || ev.Xid == 0 || ev.CommitTime.IsZero() || time.Since(ev.CommitTime) > time.Hour {
			t.Errorf("%s has no position, xid or commit time: %+v", ev.Op, ev)
		}
	}
	if ins.Xid == upd.Xid {
		t.Errorf("two transactions share xid %d", ins.Xid)
	}
}

// TestRestart stops the source, changes rows while it is away, and starts another on the
// same slot: each change arrives once, none lost, none twice. Then a source that dies after
// storing a transaction but before confirming it gets it again from the slot, and the stream
// drops the copies.
func TestRestart(t *testing.T) {
	e := newEnv(t)
	stop := run(t, e.source("a"))
	e.pg.MustPsql(t, "", `INSERT INTO orders VALUES (1, 'tea', 1, 1, null)`)
	e.waitEvents(1)
	stop()
	e.pg.MustPsql(t, "", `INSERT INTO orders VALUES (2, 'cake', 1, 1, null), (3, 'jam', 1, 1, null)`)
	e.pg.MustPsql(t, "", `UPDATE orders SET qty = 9 WHERE id = 2`)
	e.pg.MustPsql(t, "", `DELETE FROM orders WHERE id = 3`)

	b := e.source("b")
	var dies atomic.Int32
	b.SetBeforeConfirm(func() error {
		if dies.Add(1) == 1 {
			return errors.New("the host died before it confirmed")
		}
		return nil
	})
	run(t, b)
	natstest.Eventually(t, "the source confirms past the changes made while it was away", func() bool {
		return dies.Load() >= 4
	})
	e.pg.MustPsql(t, "", `INSERT INTO orders VALUES (4, 'last', 1, 1, null)`)
	got := e.waitEvents(6)
	time.Sleep(500 * time.Millisecond) // a seventh would be a copy: give it a chance to appear
	got = e.events()
	var seen []string
	for _, ev := range got {
		seen = append(seen, fmt.Sprintf("%s %v", ev.Op, idOf(ev)))
	}
	want := "insert 1,insert 2,insert 3,update 2,delete 3,insert 4"
	if strings.Join(seen, ",") != want {
		t.Fatalf("changes = %s, want each once: %s", strings.Join(seen, ","), want)
	}
}

func idOf(ev pgsource.Event) any {
	if ev.Row != nil {
		return ev.Row["id"]
	}
	return ev.Old["id"]
}

// TestSlotTaken: a second host waits for the slot, says which host holds it, and takes over
// once the first stops.
func TestSlotTaken(t *testing.T) {
	e := newEnv(t)
	stopA := run(t, e.source("host-a"))
	b := e.source("host-b")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { b.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	natstest.Eventually(t, "the second host waits for the slot", func() bool { return b.Status().State == "waiting" })
	st := b.Status()
	if !strings.Contains(st.Holder, "host-a") || !strings.Contains(st.Err.Error(), "this host waits and takes it over once it is free") {
		t.Fatalf("waiting status = %+v, want it to name host-a and say it waits", st)
	}
	stopA()
	natstest.Eventually(t, "the second host takes the slot over", func() bool { return b.Status().State == "streaming" })
	e.pg.MustPsql(t, "", `INSERT INTO orders VALUES (7, 'tea', 1, 1, null)`)
	if got := e.waitEvents(1); idOf(got[0]) != float64(7) {
		t.Fatalf("change after the take-over = %+v", got[0])
	}
}

func TestBadInput(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	mk := func(dsn string) (*pgsource.Source, error) {
		return pgsource.New(pgsource.Config{DSN: dsn, HostID: "x", JS: e.js, Stream: testStream, MsgID: e.key.Derive, Retry: 100 * time.Millisecond})
	}
	t.Run("a dsn that cannot be read", func(t *testing.T) {
		_, err := mk("postgres://a b@:port")
		if err == nil || !strings.Contains(err.Error(), "--postgres: the connection string cannot be read (write postgres://") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("a database that does not exist", func(t *testing.T) {
		s, _ := mk(e.pg.DSN("nosuchdb"))
		err := s.Check(ctx)
		if err == nil || !strings.Contains(err.Error(), "the database does not exist") || !strings.Contains(err.Error(), "name an existing one in --postgres") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("a user that does not exist", func(t *testing.T) {
		s, _ := mk(strings.Replace(e.pg.DSN(""), e.pg.User+"@", "nobody@", 1))
		err := s.Check(ctx)
		if err == nil || !strings.Contains(err.Error(), "check the user and password in --postgres") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("a port nobody listens on", func(t *testing.T) {
		s, _ := mk(strings.Replace(e.pg.DSN(""), fmt.Sprintf(":%d/", e.pg.Port), ":1/", 1))
		if err := s.Check(ctx); err != nil {
			t.Fatalf("Check = %v, want nil: a Postgres that is down is waited for", err)
		}
		s.SetTables(ctx, nil)
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go s.Run(rctx)
		s.Follow([]annot.PostgresTable{{Schema: "public", Table: "orders"}})
		natstest.Eventually(t, "the source says it cannot connect", func() bool {
			st := s.Status()
			return st.State == "error" && strings.Contains(st.Err.Error(), "check the host and port in --postgres and that Postgres runs there")
		})
	})
	t.Run("a table that does not exist", func(t *testing.T) {
		s, _ := mk(e.pg.DSN(""))
		errs := s.SetTables(ctx, []annot.PostgresTable{{Schema: "public", Table: "nosuch"}, {Schema: "public", Table: "orders"}})
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), `table public.nosuch does not exist in database "postgres": create it, or fix the on: postgres: line`) {
			t.Fatalf("errs = %v", errs)
		}
	})
	t.Run("a table without a key", func(t *testing.T) {
		e.pg.MustPsql(t, "", "CREATE TABLE notes (body text)")
		s, _ := mk(e.pg.DSN(""))
		errs := s.SetTables(ctx, []annot.PostgresTable{{Schema: "public", Table: "notes"}})
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), "add a primary key, or run `ALTER TABLE public.notes REPLICA IDENTITY FULL`") {
			t.Fatalf("errs = %v", errs)
		}
	})
}

func TestWalLevelNotLogical(t *testing.T) {
	pg := pgtest.StartWith(t, "replica")
	s, err := pgsource.New(pgsource.Config{DSN: pg.DSN(""), HostID: "x"})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Check(context.Background())
	if err == nil || !strings.Contains(err.Error(), "wal_level is \"replica\"") || !strings.Contains(err.Error(), "ALTER SYSTEM SET wal_level = logical") {
		t.Fatalf("err = %v", err)
	}
}

// TestLargeTransaction: one transaction of 5000 rows (more than JetStream's client keeps in
// flight) arrives whole, once; the time it takes is logged.
func TestLargeTransaction(t *testing.T) {
	e := newEnv(t)
	run(t, e.source("a"))
	start := time.Now()
	e.pg.MustPsql(t, "", `INSERT INTO orders SELECT i, 'item', 1, 1, null FROM generate_series(1, 5000) i`)
	inserted := time.Since(start)
	ctx := context.Background()
	natstest.Eventually(t, "5000 changes in the stream", func() bool {
		s, err := e.js.Stream(ctx, testStream)
		return err == nil && s.CachedInfo().State.Msgs >= 5000
	})
	t.Logf("5000 rows in one transaction: inserted in %v, all in JetStream %v after the insert began", inserted, time.Since(start))
	got := e.events()
	seen := map[any]bool{}
	for _, ev := range got {
		seen[ev.Row["id"]] = true
	}
	if len(got) != 5000 || len(seen) != 5000 {
		t.Fatalf("%d changes, %d rows, want 5000 each once", len(got), len(seen))
	}
}
