package flowctl

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/testkit/natstest"
)

// TestLimitLeases: n holders at most per key, keys apart; a holder that stops renewing loses
// the key when its lease passes; the same job takes its own hold again; a released key leaves
// no entry behind.
func TestLimitLeases(t *testing.T) {
	ctx := context.Background()
	_, js := natstest.Start(t)
	s, err := Open(ctx, js, 0)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	s.now = func() time.Time { return now }
	take := func(key, job string) (bool, int) {
		t.Helper()
		ok, running, err := s.Acquire(ctx, "edit", key, job, "h1", 2, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return ok, running
	}
	if ok, _ := take("acme/api", "a"); !ok {
		t.Fatal("the first holder was refused")
	}
	if ok, _ := take("acme/api", "b"); !ok {
		t.Fatal("the second of limit 2 was refused")
	}
	if ok, running := take("acme/api", "c"); ok || running != 2 {
		t.Fatalf("the third of limit 2: ok %v, %d running; want refused, 2 running", ok, running)
	}
	if ok, _ := take("acme/web", "c"); !ok {
		t.Fatal("another key was refused")
	}
	if ok, _ := take("acme/api", "a"); !ok {
		t.Fatal("a holder taking its own key again (its message delivered again) was refused")
	}
	now = now.Add(20 * time.Second)
	if held, err := s.Renew(ctx, "edit", "acme/api", "a", "h1", 30*time.Second); err != nil || !held {
		t.Fatalf("renew: %v %v", held, err)
	}
	now = now.Add(15 * time.Second) // b's lease has passed, a's renewed one has not
	if ok, running := take("acme/api", "c"); !ok || running != 2 {
		t.Fatalf("after b's lease passed: ok %v, %d running; want c to take b's place", ok, running)
	}
	if held, _ := s.Renew(ctx, "edit", "acme/api", "b", "h1", 30*time.Second); held {
		t.Fatal("a holder whose lease passed renewed it")
	}
	for _, job := range []string{"a", "c"} {
		if err := s.Release(ctx, "edit", "acme/api", job); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.kv.Get(ctx, name("limit", "edit", "acme/api")); err != jetstream.ErrKeyNotFound {
		t.Fatalf("a key with no holder left is still stored: %v", err)
	}
}

// TestRate: n starts per period per key; a refused start says when one may start again.
func TestRate(t *testing.T) {
	ctx := context.Background()
	_, js := natstest.Start(t)
	s, err := Open(ctx, js, 0)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	s.now = func() time.Time { return now }
	for i := range 3 {
		if ok, at, err := s.Start(ctx, "llm", "k", 3, time.Second); err != nil || !ok || !at.Equal(now) {
			t.Fatalf("start %d: %v %v %v", i, ok, at, err)
		}
		now = now.Add(100 * time.Millisecond)
	}
	first := now.Add(-300 * time.Millisecond)
	if ok, at, _ := s.Start(ctx, "llm", "k", 3, time.Second); ok || !at.Equal(first.Add(time.Second)) {
		t.Fatalf("the fourth start in a second: ok %v, again at %v; want refused until %v", ok, at, first.Add(time.Second))
	}
	if ok, _, _ := s.Start(ctx, "llm", "other", 3, time.Second); !ok {
		t.Fatal("another key was refused")
	}
	now = first.Add(time.Second + time.Millisecond)
	if ok, _, _ := s.Start(ctx, "llm", "k", 3, time.Second); !ok {
		t.Fatal("a start once the oldest left the period was refused")
	}
}
