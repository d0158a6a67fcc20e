package client

import (
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// deadLetter publishes a dead letter as the host does.
func deadLetter(t *testing.T, c *Client, function, jobID string) {
	t.Helper()
	m := nats.NewMsg(bus.DeadPrefix + function + "." + jobID)
	m.Header.Set(bus.HeaderJobID, jobID)
	m.Header.Set(bus.HeaderDeadFunction, function)
	m.Data = []byte(`{}`)
	if _, err := c.JS.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

func TestRemoveAndPurgeDeadLetters(t *testing.T) {
	ctx := context.Background()
	nc, js := natstest.Start(t)
	if _, err := bus.EnsureDeadStream(ctx, js, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	c := &Client{NC: nc, JS: js}
	ids := []string{"0123456789abcdefghij01", "0123456789abcdefghij02", "0123456789abcdefghij03", "0123456789abcdefghij04"}
	for _, id := range ids {
		if !ValidJobID(id) {
			t.Fatalf("test job id %q is not valid", id)
		}
	}
	deadLetter(t, c, "a", ids[0])
	deadLetter(t, c, "a", ids[1])
	deadLetter(t, c, "a", ids[2])
	deadLetter(t, c, "b", ids[3])

	if n, err := c.RemoveDeadLetter(ctx, ids[1]); err != nil || n != 1 {
		t.Fatalf("remove: %d, %v", n, err)
	}
	if _, err := c.RemoveDeadLetter(ctx, ids[1]); err == nil || !strings.Contains(err.Error(), "no dead letter") {
		t.Fatalf("remove again: %v", err)
	}
	if _, err := c.RemoveDeadLetter(ctx, "../x"); err == nil || !strings.Contains(err.Error(), "not a job id") {
		t.Fatalf("remove a bad id: %v", err)
	}
	cases := []struct {
		function string
		purged   uint64
		left     int // dead letters left in all
		err      string
	}{
		{"a", 2, 1, ""},
		{"a", 0, 1, ""},
		{"b", 1, 0, ""},
		{"a.*", 0, 0, "not a function name"},
		{"", 0, 0, "not a function name"},
		{"a\tb", 0, 0, "not a function name"},
		{"A", 0, 0, "not a function name"},
	}
	for _, tc := range cases {
		n, err := c.PurgeDeadLetters(ctx, tc.function)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("purge %q: %v, want %q", tc.function, err, tc.err)
			}
			continue
		}
		if err != nil || n != tc.purged {
			t.Fatalf("purge %q: %d, %v; want %d", tc.function, n, err, tc.purged)
		}
		if left, err := c.DeadLetters(ctx, ""); err != nil || len(left) != tc.left {
			t.Fatalf("after purging %q: %d left (%v), want %d", tc.function, len(left), err, tc.left)
		}
	}
}
