package retry

import (
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// TestSchedules pins the waits of the schedules without jitter, and the bounds of the others.
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
		}
	}
}

func TestJitterStaysWithinBounds(t *testing.T) {
	for name, p := range map[string]Policy{"Connect": Connect, "Reconnect": Reconnect, "Fetch": Fetch,
		"Publish": Publish, "JobRetry": JobRetry, "Lease": Lease, "Store": Store} {
		b := p.New()
		interval := float64(p.Initial)
		m := p.Multiplier
		if m == 0 {
			m = backoff.DefaultMultiplier
		}
		for i := range 30 {
			got := float64(b.NextBackOff())
			if lo, hi := interval*(1-p.Jitter), interval*(1+p.Jitter); got < lo || got > hi {
				t.Fatalf("%s: wait %d = %v, outside [%v, %v]", name, i+1, time.Duration(got), time.Duration(lo), time.Duration(hi))
			}
			interval = min(interval*m, float64(p.Max))
		}
	}
}

func TestWithinGivesUp(t *testing.T) {
	b := Store.Within(time.Nanosecond).New()
	time.Sleep(time.Millisecond)
	if got := b.NextBackOff(); got != backoff.Stop {
		t.Fatalf("a schedule past its bound waits %v, want backoff.Stop", got)
	}
	if got := Store.New().NextBackOff(); got == backoff.Stop {
		t.Fatal("a schedule without a bound gave up")
	}
}
