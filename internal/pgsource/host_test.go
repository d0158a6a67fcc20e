package pgsource_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/testkit/pgtest"
)

// watch is a jailed function that starts on every change of orders and returns its arguments.
const watch = `# sandbox
# on: postgres:orders
import json

def main(schema, table, op, row, old, lsn, xid, commit_time):
    return {"schema": schema, "table": table, "op": op, "row": row, "old": old, "lsn": lsn, "xid": xid, "commit_time": commit_time}
`

type ran struct {
	Table, Op  string
	Row, Old   map[string]any
	LSN        string
	Xid        uint32
	CommitTime string `json:"commit_time"`
}

func next(t *testing.T, h *hosttest.H, ch <-chan *nats.Msg) ran {
	t.Helper()
	var r ran
	if err := json.Unmarshal(h.Next(ch).Data, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestHostRunsChanges: a real host, a real jail and a real Postgres. Inserts, updates and
// deletes start the function with the change; a host stopped while rows change, and a host
// started after, run each change exactly once.
func TestHostRunsChanges(t *testing.T) {
	pg := pgtest.Start(t)
	pg.MustPsql(t, "", "CREATE TABLE orders (id int PRIMARY KEY, item text, qty int)")
	withPG := func(c *app.Config) { c.Postgres = app.Postgres{DSN: pg.DSN(""), Retry: 200 * time.Millisecond} }
	h := hosttest.New(t, map[string]string{"watch.py": watch}, withPG)
	results := h.Sub(bus.ResultSubject("watch"))
	waitLog(t, h, "postgres: following tables from the replication slot")

	start := time.Now()
	pg.MustPsql(t, "", `INSERT INTO orders VALUES (1, 'tea', 2)`)
	ins := next(t, h, results)
	t.Logf("insert to its jailed run's result: %v (psql included)", time.Since(start))
	pg.MustPsql(t, "", `UPDATE orders SET qty = 3 WHERE id = 1`)
	upd := next(t, h, results)
	pg.MustPsql(t, "", `DELETE FROM orders WHERE id = 1`)
	del := next(t, h, results)
	if ins.Table != "orders" || ins.Op != "insert" || ins.Row["item"] != "tea" || ins.Row["qty"] != float64(2) || ins.Old != nil || ins.LSN == "" || ins.Xid == 0 || ins.CommitTime == "" {
		t.Errorf("insert ran with %+v", ins)
	}
	if upd.Op != "update" || upd.Row["qty"] != float64(3) || upd.Old["id"] != float64(1) {
		t.Errorf("update ran with %+v", upd)
	}
	if del.Op != "delete" || del.Row != nil || del.Old["id"] != float64(1) {
		t.Errorf("delete ran with %+v", del)
	}

	// The host stops; rows change; another host (the same functions and NATS: the first one
	// started again) takes the slot and runs what changed while none was up.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	h.Host.Shutdown(ctx)
	cancel()
	pg.MustPsql(t, "", `INSERT INTO orders VALUES (2, 'cake', 1), (3, 'jam', 1)`)
	pg.MustPsql(t, "", `UPDATE orders SET qty = 5 WHERE id = 2`)
	pg.MustPsql(t, "", `DELETE FROM orders WHERE id = 3`)
	h.AddHost(t, withPG)
	var got []string
	for range 4 {
		r := next(t, h, results)
		id := r.Row["id"]
		if r.Row == nil {
			id = r.Old["id"]
		}
		got = append(got, fmt.Sprintf("%s %v", r.Op, id))
	}
	slices.Sort(got)
	if want := "delete 3,insert 2,insert 3,update 2"; strings.Join(got, ",") != want {
		t.Fatalf("runs after the restart = %s, want %s", strings.Join(got, ","), want)
	}
	pg.MustPsql(t, "", `INSERT INTO orders VALUES (4, 'last', 1)`)
	if r := next(t, h, results); r.Op != "insert" || r.Row["id"] != float64(4) {
		t.Fatalf("the run after = %+v, want insert 4 and no change run twice", r)
	}
}

func waitLog(t *testing.T, h *hosttest.H, msg string) {
	t.Helper()
	h.Eventually("the host logs "+msg, func() bool { return h.Logs.FilterMessage(msg).Len() > 0 })
}

// TestSecondHostTakesOver: two hosts given --postgres; one holds the slot, and when it stops
// the other takes it over and runs the next change, once.
func TestSecondHostTakesOver(t *testing.T) {
	pg := pgtest.Start(t)
	pg.MustPsql(t, "", "CREATE TABLE orders (id int PRIMARY KEY, item text, qty int)")
	withPG := func(c *app.Config) { c.Postgres = app.Postgres{DSN: pg.DSN(""), Retry: 200 * time.Millisecond} }
	h := hosttest.New(t, map[string]string{"watch.py": watch}, withPG)
	results := h.Sub(bus.ResultSubject("watch"))
	waitLog(t, h, "postgres: following tables from the replication slot")
	h.AddHost(t, withPG)
	holder := `SELECT coalesce((SELECT a.application_name FROM pg_replication_slots s JOIN pg_stat_activity a ON a.pid = s.active_pid WHERE s.slot_name = 'agenthost'), '')`
	if got := pg.MustPsql(t, "", holder); got != "host test" {
		t.Fatalf("slot held by %q, want the first host", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	h.Host.Shutdown(ctx)
	cancel()
	h.Eventually("the second host holds the slot", func() bool { return pg.MustPsql(t, "", holder) == "host test-2" })
	pg.MustPsql(t, "", `INSERT INTO orders VALUES (1, 'tea', 1)`)
	if r := next(t, h, results); r.Op != "insert" || r.Row["id"] != float64(1) {
		t.Fatalf("run on the second host = %+v", r)
	}
	select {
	case m := <-results:
		t.Fatalf("a second run: %s", m.Data)
	case <-time.After(time.Second):
	}
}
