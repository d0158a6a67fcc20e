package schedule

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap/zaptest"
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
		s, err := Parse(c.expr)
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

// recorder is a Publish that keeps the ticks it was given.
type recorder struct {
	mu    sync.Mutex
	ticks map[string][]time.Time
	err   error
}

func (r *recorder) publish(_ context.Context, fn string, tick time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ticks == nil {
		r.ticks = map[string][]time.Time{}
	}
	r.ticks[fn] = append(r.ticks[fn], tick)
	return r.err
}

func (r *recorder) of(fn string) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.ticks[fn]...)
}

// The scheduler runs in a synctest bubble: its clock starts at 2000-01-01 00:00 UTC and moves
// only when every goroutine waits, so the tick times are exact.
func TestSchedulerFires(t *testing.T) {
	start := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name    string
		expr    string
		run     time.Duration
		pubErr  error
		want    []time.Time
		comment string
	}{
		{name: "every second", expr: "@every 1s", run: 3500 * time.Millisecond,
			want: []time.Time{start.Add(time.Second), start.Add(2 * time.Second), start.Add(3 * time.Second)}},
		{name: "cron", expr: "*/5 * * * *", run: 11 * time.Minute,
			want: []time.Time{start.Add(5 * time.Minute), start.Add(10 * time.Minute)}},
		{name: "a failed publish does not stop the timer", expr: "@every 1m", run: 150 * time.Second, pubErr: errors.New("no NATS"),
			want: []time.Time{start.Add(time.Minute), start.Add(2 * time.Minute)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				if !time.Now().Equal(start) {
					t.Fatalf("bubble starts at %v, want %v", time.Now(), start)
				}
				r := &recorder{err: tc.pubErr}
				s := New(zaptest.NewLogger(t), Parse, r.publish)
				if err := s.Set(t.Context(), "f", tc.expr); err != nil {
					t.Fatal(err)
				}
				time.Sleep(tc.run)
				s.Stop()
				got := r.of("f")
				if len(got) != len(tc.want) {
					t.Fatalf("ticks %v, want %v", got, tc.want)
				}
				for i := range got {
					if !got[i].Equal(tc.want[i]) {
						t.Fatalf("ticks %v, want %v", got, tc.want)
					}
				}
				if fs := s.Functions(); len(fs) != 0 {
					t.Fatalf("still running after Stop: %v", fs)
				}
			})
		})
	}
}

func TestSchedulerSetReplacesAndRemoves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		r := &recorder{}
		s := New(zaptest.NewLogger(t), Parse, r.publish)
		defer s.Stop()
		if err := s.Set(t.Context(), "bad", "not a schedule"); err == nil || !strings.Contains(err.Error(), `"not a schedule"`) {
			t.Fatalf("a bad expression: %v", err)
		}
		if err := s.Set(t.Context(), "f", "@every 1m"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(90 * time.Second) // one tick at 1m
		if err := s.Set(t.Context(), "f", "@every 1h"); err != nil {
			t.Fatal(err)
		}
		if err := s.Set(t.Context(), "g", "@every 1h"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Hour) // f's and g's tick at 1h; none from the replaced 1m timer
		s.Remove("g")
		time.Sleep(time.Hour) // f ticks at 2h, g no more
		if got, want := r.of("f"), []time.Time{start.Add(time.Minute), start.Add(time.Hour), start.Add(2 * time.Hour)}; !equalTimes(got, want) {
			t.Errorf("f ticked at %v, want %v", got, want)
		}
		if got, want := r.of("g"), []time.Time{start.Add(time.Hour)}; !equalTimes(got, want) {
			t.Errorf("g ticked at %v, want %v", got, want)
		}
		if fs := s.Functions(); len(fs) != 1 || fs[0] != "f" {
			t.Errorf("running %v, want [f]", fs)
		}
	})
}

func equalTimes(a, b []time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

// A paused schedule skips its ticks; resumed, it fires on the next tick of the same calendar,
// without a burst of the skipped ones.
func TestSchedulerPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		r := &recorder{}
		s := New(zaptest.NewLogger(t), Parse, r.publish)
		defer s.Stop()
		if err := s.Set(t.Context(), "f", "@every 1m"); err != nil {
			t.Fatal(err)
		}
		steps := []struct {
			pause *Pause
			wait  time.Duration
		}{
			{nil, 90 * time.Second},               // tick at 1m
			{&Pause{By: "ada"}, 60 * time.Second}, // 2m skipped
			{&Pause{By: "ada"}, 60 * time.Second}, // pausing again changes nothing: 3m skipped
			{nil, 100 * time.Second},              // resumed at 3m30: 4m and 5m fire
		}
		for _, st := range steps {
			s.SetPaused("f", st.pause)
			time.Sleep(st.wait)
		}
		want := []time.Time{start.Add(time.Minute), start.Add(4 * time.Minute), start.Add(5 * time.Minute)}
		if got := r.of("f"); !equalTimes(got, want) {
			t.Errorf("ticks %v, want %v", got, want)
		}
	})
}
