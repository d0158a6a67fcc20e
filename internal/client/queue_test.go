package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// A function's queue: limit refuses the call past it, queues nothing and leaves no record; the
// stream-wide per-subject cap refuses a publish on a full subject with the server's reason,
// and the record written for that call is withdrawn. Other functions are not held back.
func TestQueueLimits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, _ := newLogClient(t)
	run, err := bus.EnsureRunStream(ctx, c.JS, nil, bus.StreamOptions{MaxPerSubject: 3})
	if err != nil {
		t.Fatal(err)
	}
	// flooded says queue: 2; capped has none, so the stream's cap of 3 holds it; calm is
	// another function, untouched by both.
	for fn, queue := range map[string]int{"flooded": 2, "capped": 0, "calm": 0} {
		if _, err := bus.EnsureConsumer(ctx, run, fn, []string{bus.RunSubject(fn)}, time.Minute, queue); err != nil {
			t.Fatal(err)
		}
	}
	invoke := func(fn string, i int) error {
		return c.Invoke(ctx, fn, fmt.Sprintf("%s-%d", fn, i), []byte(`{}`))
	}
	cases := []struct {
		fn       string
		accepted int
		wantErr  string
		isQueue  bool
	}{
		{"flooded", 2, "queue: 2", true},
		{"capped", 3, "maximum messages per subject exceeded; the trigger stream's cap per subject", true},
		{"calm", 3, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.fn, func(t *testing.T) {
			for i := range tc.accepted {
				if err := invoke(tc.fn, i); err != nil {
					t.Fatalf("call %d of %d: %v", i+1, tc.accepted, err)
				}
			}
			if tc.wantErr == "" {
				return
			}
			// A consumer counts a stored trigger as pending a moment after the store's
			// acknowledgement; the queue: check reads that count (calls racing each other may
			// pass it by a few, as the contract says). This test is about the call after them.
			natstest.Eventually(t, tc.fn+"'s consumer counts its accepted triggers", func() bool {
				cons, err := run.Consumer(ctx, bus.ConsumerName(tc.fn))
				return err == nil && cons.CachedInfo().NumPending >= uint64(tc.accepted)
			})
			err := invoke(tc.fn, tc.accepted)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || bus.QueueFull(err) != tc.isQueue {
				t.Fatalf("call past the limit: %v; want a refusal saying %q (QueueFull %v)", err, tc.wantErr, tc.isQueue)
			}
			t.Logf("refused: %v", err)
			if _, err := c.Jobs.Get(ctx, fmt.Sprintf("%s-%d", tc.fn, tc.accepted)); !errors.Is(err, jobs.ErrNotFound) {
				t.Errorf("the refused call left a record (or the lookup failed): %v", err)
			}
		})
	}
	info, err := run.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.State.Msgs; got != 2+3+3 {
		t.Errorf("the stream holds %d triggers, want the 8 accepted", got)
	}
}
