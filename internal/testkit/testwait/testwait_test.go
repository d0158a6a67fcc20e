package testwait

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestPoll(t *testing.T) {
	cases := []struct {
		name    string
		holdsAt int // the call from which check returns nil; 0 never
		within  time.Duration
		wantErr string
	}{
		{"at once", 1, time.Second, ""},
		{"after a few looks", 4, time.Second, ""},
		{"never: the last state", 0, 100 * time.Millisecond, "seen"},
		{"no time: still looks once", 1, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			err := Poll(c.within, func() error {
				calls++
				if c.holdsAt > 0 && calls >= c.holdsAt {
					return nil
				}
				return fmt.Errorf("seen %d", calls)
			})
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("Poll = %v after %d calls, want nil", err, calls)
			case c.wantErr != "" && (err == nil || err.Error() != fmt.Sprintf("seen %d", calls)):
				t.Fatalf("Poll = %v after %d calls, want the last call's error", err, calls)
			}
		})
	}
}

func TestCond(t *testing.T) {
	if err := Cond(func() bool { return true })(); err != nil {
		t.Fatalf("a condition that holds: %v", err)
	}
	if err := Cond(func() bool { return false })(); !errors.Is(err, errNotYet) {
		t.Fatalf("a condition that does not hold: %v", err)
	}
}

// recorder is a testing.TB that keeps what For fails with instead of ending the test.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.failed = fmt.Sprintf(format, args...)
	r.mu.Unlock()
}

func TestForSaysWhatItSaw(t *testing.T) {
	r := &recorder{TB: t}
	For(r, "the queue to drain", 50*time.Millisecond, func() error { return errors.New("3 messages pending") })
	for _, want := range []string{"the queue to drain", "50ms", "3 messages pending"} {
		if !strings.Contains(r.failed, want) {
			t.Errorf("failure %q does not say %q", r.failed, want)
		}
	}
	r = &recorder{TB: t}
	For(r, "nothing", time.Second, func() error { return nil })
	if r.failed != "" {
		t.Errorf("a wait that ended failed: %s", r.failed)
	}
}
