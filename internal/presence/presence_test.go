package presence_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/agenthost/host/internal/presence"
	"github.com/agenthost/host/internal/testkit/natstest"
	"github.com/agenthost/host/internal/testkit/testwait"
)

func hostsOf(t *testing.T, b *presence.Board, function string) []string {
	t.Helper()
	entries, err := b.List(context.Background(), function)
	if err != nil {
		t.Fatal(err)
	}
	var hosts []string
	for _, e := range entries {
		hosts = append(hosts, e.Function+"@"+e.Host)
	}
	slices.Sort(hosts)
	return hosts
}

// TestAFunctionIsServedWhileItsHostLives: a function entry counts only while its host's entry
// does; a host that leaves, or stops saying it is alive, takes its functions with it at once,
// although their entries stay in the bucket.
func TestAFunctionIsServedWhileItsHostLives(t *testing.T) {
	ctx := context.Background()
	_, js := natstest.Start(t)
	if _, err := presence.Bind(ctx, js); !errors.Is(err, presence.ErrNoHosts) {
		t.Fatalf("bind before any host: %v, want ErrNoHosts", err)
	}
	const ttl = 2 * time.Second
	b, err := presence.Open(ctx, js, ttl, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"leaves", "dies", "lives.on/a:b"} {
		for _, fn := range []string{"hello", "other"} {
			if err := b.Announce(ctx, fn, presence.Announcement{Version: "v1", Host: host}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := hostsOf(t, b, ""); len(got) != 0 {
		t.Fatalf("entries of hosts that never said they were alive: %v", got)
	}
	for _, host := range []string{"leaves", "dies", "lives.on/a:b"} {
		if err := b.Alive(ctx, host); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := hostsOf(t, b, "hello"), []string{"hello@dies", "hello@leaves", "hello@lives.on/a:b"}; !slices.Equal(got, want) {
		t.Fatalf("hello: %v, want %v", got, want)
	}
	if err := b.Leave(ctx, "leaves"); err != nil {
		t.Fatal(err)
	}
	if err := b.Withdraw(ctx, "other", "lives.on/a:b"); err != nil {
		t.Fatal(err)
	}
	if got, want := hostsOf(t, b, ""), []string{"hello@dies", "hello@lives.on/a:b", "other@dies"}; !slices.Equal(got, want) {
		t.Fatalf("after a leave and a withdraw: %v, want %v", got, want)
	}
	// "dies" stops saying it is alive; the other keeps at it, as a host's heartbeat does.
	bound, err := presence.Bind(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"hello@lives.on/a:b"}
	testwait.For(t, "the dead host's functions to leave the listing", 4*ttl, func() error {
		if err := b.Alive(ctx, "lives.on/a:b"); err != nil {
			return err
		}
		if got := hostsOf(t, bound, ""); !slices.Equal(got, want) {
			return fmt.Errorf("listed %v, want %v", got, want)
		}
		return nil
	})
}
