package schedule

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/agenthost/host/internal/annot"
)

func TestNextAgreesAcrossHosts(t *testing.T) {
	utc := time.Date(2026, 11, 29, 10, 7, 30, 0, time.UTC)
	tokyo := utc.In(time.FixedZone("JST", 9*3600))
	cases := []struct {
		expr string
		want time.Time
	}{
		{"@every 10s", time.Date(2026, 11, 29, 10, 7, 40, 0, time.UTC)},
		{"@every 1m", time.Date(2026, 11, 29, 10, 8, 0, 0, time.UTC)},
		{"*/5 * * * *", time.Date(2026, 11, 29, 10, 10, 0, 0, time.UTC)},
		{"0 12 * * *", time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)},
		{"@hourly", time.Date(2026, 11, 29, 11, 0, 0, 0, time.UTC)},
	}
	for _, c := range cases {
		s, err := annot.ParseSchedule(c.expr)
		if err != nil {
			t.Fatalf("%s: %v", c.expr, err)
		}
		// Two hosts in different time zones, one started a few seconds later, pick the same tick.
		a, b := Next(s, utc), Next(s, tokyo.Add(3*time.Second))
		if !a.Equal(c.want) || !b.Equal(c.want) {
			t.Errorf("%s: next = %v and %v, want %v", c.expr, a, b, c.want)
		}
	}
}

func TestSchedulerFiresAndStops(t *testing.T) {
	var mu sync.Mutex
	var ticks []time.Time
	fired := make(chan struct{}, 16)
	s := New(zaptest.NewLogger(t), annot.ParseSchedule, func(_ context.Context, fn string, tick time.Time) error {
		if fn != "f" {
			t.Errorf("publish(%s, %v)", fn, tick)
		}
		mu.Lock()
		ticks = append(ticks, tick)
		mu.Unlock()
		fired <- struct{}{}
		return nil
	})
	if err := s.Set(context.Background(), "f", "@every 1s"); err != nil {
		t.Fatal(err)
	}
	if err := s.Set(context.Background(), "bad", "not a schedule"); err == nil {
		t.Fatal("a bad expression was accepted")
	}
	for range 2 {
		select {
		case <-fired:
		case <-time.After(30 * time.Second):
			t.Fatal("no tick within 30s")
		}
	}
	s.Stop()
	mu.Lock()
	defer mu.Unlock()
	if !ticks[1].After(ticks[0]) || ticks[0].Nanosecond() != 0 {
		t.Fatalf("ticks %v", ticks)
	}
	if len(s.Functions()) != 0 {
		t.Fatalf("still running after Stop: %v", s.Functions())
	}
}
