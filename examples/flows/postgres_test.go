package flows_test

import (
	"testing"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/testkit/pgtest"
)

// TestPostgresOrders runs examples/flows/postgres-orders against a real Postgres, as its
// README does.
func TestPostgresOrders(t *testing.T) {
	pg := pgtest.Start(t)
	pg.MustPsql(t, "", "CREATE TABLE orders (id int PRIMARY KEY, customer text, qty int, price numeric)")
	h := hosttest.New(t, folder(t, "postgres-orders"), func(c *app.Config) { c.Postgres = app.Postgres{DSN: pg.DSN("")} })
	receipts, changed := h.Sub("agent.result.receipt"), h.Sub("agent.result.order_changed")
	h.Eventually("the host follows orders", func() bool {
		return h.Logs.FilterMessage("postgres: following tables from the replication slot").Len() > 0
	})
	pg.MustPsql(t, "", "INSERT INTO orders VALUES (1, 'ada', 3, 40)")
	if r := hosttest.Decode[map[string]any](t, h.Next(receipts).Data); r["receipt"] != "order 1 for ada: 120.00" {
		t.Fatalf("receipt = %v", r)
	}
	pg.MustPsql(t, "", "UPDATE orders SET qty = 1 WHERE id = 1")
	if r := hosttest.Decode[map[string]any](t, h.Next(changed).Data); r["qty"] != float64(1) {
		t.Fatalf("update = %v", r)
	}
	pg.MustPsql(t, "", "DELETE FROM orders WHERE id = 1")
	if r := hosttest.Decode[map[string]any](t, h.Next(changed).Data); r["cancelled"] != true || r["order"] != float64(1) {
		t.Fatalf("delete = %v", r)
	}
}
