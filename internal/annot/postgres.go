package annot

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// PostgresPrefix starts an "on:" that listens to a Postgres table's changes:
// "on: postgres:<table> [insert] [update] [delete]".
const PostgresPrefix = "postgres:"

// PostgresOps are the changes a table source delivers, in the order they are listed.
var PostgresOps = []string{"insert", "update", "delete"}

const postgresUsage = `write "on: postgres:<table> [insert] [update] [delete]" (all three when none is named), the table as "<name>" (schema public) or "<schema>.<name>", e.g. "on: postgres:orders insert update"`

// pgIdent is an identifier the way Postgres folds an unquoted one: lower case. It is also a
// NATS subject token as it is.
var pgIdent = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// PostgresTable is a table whose changes a function listens to.
type PostgresTable struct {
	Schema, Table string
}

// String is the table as SQL names it, schema-qualified.
func (t PostgresTable) String() string { return t.Schema + "." + t.Table }

// PostgresSubject is the subject a change of op on schema.table is published to (package
// pgsource publishes there; "on: postgres:" subscribes to it).
func PostgresSubject(schema, table, op string) string {
	return "postgres." + schema + "." + table + "." + op
}

// postgresOn reads an "on: postgres:..." line into its subjects; it reports false for any other
// "on:", which is then a plain subject.
func (p *parser) postgresOn(line int, value string) bool {
	if !strings.HasPrefix(value, PostgresPrefix) {
		return false
	}
	subjects, err := parsePostgresOn(strings.TrimPrefix(value, PostgresPrefix))
	if err != nil {
		p.errorf(line, "on: %q: %v; %s", value, err, postgresUsage)
		return true
	}
	for _, s := range subjects {
		p.subject(line, "on", s)
	}
	return true
}

func parsePostgresOn(rest string) ([]string, error) {
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return nil, fmt.Errorf("names no table")
	}
	schema, table, qualified := strings.Cut(fields[0], ".")
	if !qualified {
		schema, table = "public", fields[0]
	}
	for _, id := range []string{schema, table} {
		if !pgIdent.MatchString(id) {
			return nil, fmt.Errorf("%q is not a table name this host takes: lower-case letters, digits and _ only, not starting with a digit (the way Postgres stores an unquoted name)", fields[0])
		}
	}
	ops := fields[1:]
	if len(ops) == 0 {
		ops = PostgresOps
	}
	var subjects []string
	for _, op := range ops {
		if !slices.Contains(PostgresOps, op) {
			return nil, fmt.Errorf("%q is not a change: write insert, update or delete", op)
		}
		s := PostgresSubject(schema, table, op)
		if slices.Contains(subjects, s) {
			return nil, fmt.Errorf("names %s twice", op)
		}
		subjects = append(subjects, s)
	}
	return subjects, nil
}

// PostgresTables are the tables named by on subjects (as "on: postgres:" writes them, or as a
// plain "on: postgres.<schema>.<table>.<op>"), each once, in order; subjects with a wildcard
// in the schema or table name no table.
func PostgresTables(on []string) []PostgresTable {
	var tables []PostgresTable
	for _, s := range on {
		tokens := strings.Split(s, ".")
		if len(tokens) != 4 || tokens[0] != "postgres" || !pgIdent.MatchString(tokens[1]) || !pgIdent.MatchString(tokens[2]) {
			continue
		}
		t := PostgresTable{Schema: tokens[1], Table: tokens[2]}
		if !slices.Contains(tables, t) {
			tables = append(tables, t)
		}
	}
	return tables
}
