package retry

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// TestSchedules pins the waits of the schedules without jitter, and the bounds of the others:
// Delay(n) and the n-th wait of New are the same arithmetic.
func TestSchedules(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name string
		p    Policy
		want []time.Duration // exact when the policy has no jitter
	}{
		{"FinalLine", FinalLine, []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 1600 * ms}},
		{"Record", Record, []time.Duration{250 * ms, 500 * ms, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second}},
		{"JobRetry without jitter", Policy{Initial: time.Second, Max: 4 * time.Second, Multiplier: 2},
			[]time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second}},
		{"default multiplier", Policy{Initial: 100 * ms, Max: time.Second}, []time.Duration{100 * ms, 150 * ms, 225 * ms}},
	}
	for _, c := range cases {
		b := c.p.New()
		for i, want := range c.want {
			if got := b.NextBackOff(); got != want {
				t.Errorf("%s: wait %d = %v, want %v", c.name, i+1, got, want)
			}
			if got := c.p.Delay(i + 1); got != want {
				t.Errorf("%s: Delay(%d) = %v, want %v", c.name, i+1, got, want)
			}
		}
	}
	if got := JobRetry.Delay(0); got != time.Second {
		t.Errorf("JobRetry.Delay(0) = %v, want the first wait", got)
	}
	if got := JobRetry.Delay(1000); got != 5*time.Minute {
		t.Errorf("JobRetry.Delay(1000) = %v, want the cap", got)
	}
}

func TestJitterStaysWithinBounds(t *testing.T) {
	for name, p := range map[string]Policy{"Connect": Connect, "Reconnect": Reconnect, "Fetch": Fetch,
		"Publish": Publish, "JobRetry": JobRetry, "Lease": Lease, "Store": Store} {
		b := p.New()
		interval := float64(p.Initial)
		for i := range 30 {
			lo, hi := interval*(1-p.Jitter), interval*(1+p.Jitter)
			if got := float64(b.NextBackOff()); got < lo || got > hi+1 {
				t.Fatalf("%s: wait %d = %v, outside [%v, %v]", name, i+1, time.Duration(got), time.Duration(lo), time.Duration(hi))
			}
			if got := float64(p.Wait(i + 1)); got < lo || got > hi {
				t.Fatalf("%s: Wait(%d) = %v, outside [%v, %v]", name, i+1, time.Duration(got), time.Duration(lo), time.Duration(hi))
			}
			interval = min(interval*p.multiplier(), float64(p.Max))
		}
	}
}

func TestDoGivesUpWithin(t *testing.T) {
	failing := errors.New("down")
	tries := 0
	_, err := Do(context.Background(), Store.Within(time.Nanosecond), func() (int, error) {
		tries++
		return 0, failing
	})
	if !errors.Is(err, failing) || tries != 1 {
		t.Fatalf("a schedule past its bound: %d tries, %v; want 1 try and the op's error", tries, err)
	}
	// Without a bound Do does not take backoff.Retry's default of 15 minutes: it stops with ctx.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	tries = 0
	_, err = Do(ctx, Policy{Initial: time.Millisecond, Max: time.Millisecond}, func() (int, error) {
		tries++
		return 0, failing
	})
	if !errors.Is(err, context.DeadlineExceeded) || tries < 10 {
		t.Fatalf("an unbounded schedule: %d tries, %v; want many and the context's error", tries, err)
	}
	if _, err := Do(context.Background(), Store, func() (int, error) { return 0, Permanent(failing) }); !errors.Is(err, failing) {
		t.Fatalf("a permanent error: %v", err)
	}
	_, err = Do(context.Background(), Store, func() (int, error) { return 0, Permanent(failing) }, backoff.WithMaxTries(1))
	if err != failing {
		t.Fatalf("a permanent error on the last try allowed: %#v, want the error itself", err)
	}
}

// A try cut off by the caller's deadline fails with the deadline; the error still names why
// the tries before it failed, which is what the caller can act on.
func TestDeadlineKeepsTheCause(t *testing.T) {
	refused := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	tries := 0
	_, err := Do(ctx, Policy{Initial: 50 * time.Millisecond, Max: 50 * time.Millisecond}, func() (int, error) {
		tries++
		if tries == 1 {
			return 0, refused
		}
		<-ctx.Done() // the next try runs into the deadline, as a slow request would
		return 0, ctx.Err()
	})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, refused) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("err = %v; want the deadline and the refusal before it", err)
	}
}
