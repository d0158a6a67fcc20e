package client

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/agenthost/host/internal/presence"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// TestFunctionsListsHostsSorted: `host functions` printed a function's hosts in the order they
// last wrote their announcements, which made TestCancelJobsFunctionsCLI fail on a fresh machine.
// Hosts, versions and warm counts come in host order, however the hosts wrote them.
func TestFunctionsListsHostsSorted(t *testing.T) {
	ctx := context.Background()
	nc, js := natstest.Start(t)
	board, err := presence.Open(ctx, js, time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	warm := func(n int) *int { return &n }
	// Written in this order: the bucket returns entries in the order they were last written.
	for _, a := range []presence.Announcement{
		{Version: "v2", Host: "host-c", Runtime: "python", Warm: warm(3)},
		{Version: "v1", Host: "host-a", Runtime: "python", Warm: warm(1)},
		{Version: "v1", Host: "host-b", Runtime: "python", Warm: warm(2)},
	} {
		if err := board.Alive(ctx, a.Host); err != nil {
			t.Fatal(err)
		}
		if err := board.Announce(ctx, "hello", a); err != nil {
			t.Fatal(err)
		}
	}
	c := &Client{NC: nc, JS: js}
	fns, err := c.FunctionsOf(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(fns) != 1 {
		t.Fatalf("functions: %+v", fns)
	}
	f := fns[0]
	if want := []string{"host-a", "host-b", "host-c"}; !slices.Equal(f.Hosts, want) {
		t.Errorf("hosts %v, want %v", f.Hosts, want)
	}
	if want := []string{"v1", "v2"}; !slices.Equal(f.Versions, want) {
		t.Errorf("versions %v, want %v", f.Versions, want)
	}
	if f.Warm != "1,2,3" {
		t.Errorf("warm %q, want the hosts' counts in host order, 1,2,3", f.Warm)
	}
}
