package annot

import (
	"slices"
	"strings"
	"testing"
)

func TestPostgresOn(t *testing.T) {
	for _, c := range []struct {
		src  string
		want []string
	}{
		{"# on: postgres:orders", []string{"postgres.public.orders.insert", "postgres.public.orders.update", "postgres.public.orders.delete"}},
		{"# on: postgres:shop.orders delete insert", []string{"postgres.shop.orders.delete", "postgres.shop.orders.insert"}},
		{"# on: postgres:orders update\n# on: orders.created", []string{"postgres.public.orders.update", "orders.created"}},
	} {
		s, err := Parse("f.py", []byte(c.src))
		if err != nil {
			t.Fatalf("%q: %v", c.src, err)
		}
		if !slices.Equal(s.On, c.want) {
			t.Errorf("%q: On = %q, want %q", c.src, s.On, c.want)
		}
	}
	tables := PostgresTables([]string{"postgres.public.orders.insert", "postgres.public.orders.update", "postgres.shop.x.delete", "postgres.*.y.insert", "orders.created"})
	if want := []PostgresTable{{"public", "orders"}, {"shop", "x"}}; !slices.Equal(tables, want) {
		t.Errorf("PostgresTables = %v, want %v", tables, want)
	}
}

func TestPostgresOnRefused(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"# on: postgres:", "names no table"},
		{"# on: postgres:Orders", `"Orders" is not a table name`},
		{"# on: postgres:a.b.c", `"a.b.c" is not a table name`},
		{"# on: postgres:orders upsert", `"upsert" is not a change: write insert, update or delete`},
		{"# on: postgres:orders insert insert", "names insert twice"},
		{"# on: postgres:orders insert\n# on: postgres:orders insert", "already given on line 1"},
	} {
		_, err := Parse("f.py", []byte(c.src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want one saying %q", c.src, err, c.want)
		}
		if err != nil && !strings.Contains(err.Error(), "already") && !strings.Contains(err.Error(), "on: postgres:<table>") {
			t.Errorf("%q: err = %v does not say how to write it", c.src, err)
		}
	}
}
