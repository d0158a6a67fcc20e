package pgtest_test

import (
	"testing"

	"github.com/agenthost/host/internal/testkit/pgtest"
)

// TestStart starts a cluster with logical decoding and checks it answers with it.
func TestStart(t *testing.T) {
	c := pgtest.Start(t)
	if got := c.MustPsql(t, "", "show wal_level"); got != "logical" {
		t.Fatalf("wal_level = %q, want logical", got)
	}
}
