package flowctl

import (
	"context"
	"testing"
	"time"

	"github.com/agenthost/host/internal/testkit/natstest"
)

// TestDebounceNewest: the newest message by stream order wins whichever is seen first; keys
// apart; an older message seen again still finds the newer one.
func TestDebounceNewest(t *testing.T) {
	ctx := context.Background()
	_, js := natstest.Start(t)
	s, err := Open(ctx, js, 0)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	see := func(key, job string, seq uint64) Newest {
		t.Helper()
		n, err := s.Debounce(ctx, "push", key, job, seq, t0.Add(time.Duration(seq)*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := see("a", "j1", 1); n.Job != "j1" || n.Seq != 1 {
		t.Fatalf("first message: newest %+v, want j1", n)
	}
	if n := see("a", "j3", 3); n.Job != "j3" {
		t.Fatalf("newer message: newest %+v, want j3", n)
	}
	if n := see("a", "j2", 2); n.Job != "j3" || !n.At.Equal(t0.Add(3*time.Millisecond)) {
		t.Fatalf("older message seen after a newer: newest %+v, want j3 at +3ms", n)
	}
	if n := see("b", "j4", 4); n.Job != "j4" {
		t.Fatalf("another key: newest %+v, want j4", n)
	}
	if n := see("a", "j1", 1); n.Job != "j3" {
		t.Fatalf("the first message delivered again: newest %+v, want j3", n)
	}
}

// TestPriorityLevels: a waiting level holds back lower ones only; the job that marked it last
// clears it when it starts; a mark lapses after PriorityTTL.
func TestPriorityLevels(t *testing.T) {
	ctx := context.Background()
	_, js := natstest.Start(t)
	s, err := Open(ctx, js, 0)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	s.now = func() time.Time { return now }
	look := func(job string, p int, wait bool) int {
		t.Helper()
		top, err := s.Priority(ctx, "f", job, p, wait)
		if err != nil {
			t.Fatal(err)
		}
		return top
	}
	if top := look("low", 1, true); top != 0 {
		t.Fatalf("nothing higher waits, top %d", top)
	}
	look("high", 9, true)
	if top := look("low", 1, false); top != 9 {
		t.Fatalf("a 1 about to start: top %d, want 9", top)
	}
	if top := look("high", 9, false); top != 0 {
		t.Fatalf("the 9 about to start: top %d, want 0", top)
	}
	if top := look("low", 1, false); top != 0 {
		t.Fatalf("after the 9 started: top %d, want 0 (its mark cleared)", top)
	}
	look("high2", 7, true)
	now = now.Add(PriorityTTL + time.Millisecond)
	if top := look("low", 1, false); top != 0 {
		t.Fatalf("after the 7's mark lapsed: top %d, want 0", top)
	}
}
