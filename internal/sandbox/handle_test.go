package sandbox

import (
	"context"
	"testing"
	"time"
)

// A run ended through Handle.End delivers the code it was given while its tree still runs;
// Destroy then kills the tree and returns once it is gone and, for a hardened jail, its cgroup
// removed. The command here would never end on its own.
func TestEndDeliversBeforeTeardown(t *testing.T) {
	hardened := newTestBwrap(t)
	for _, c := range []struct {
		name string
		jail Jail
		// inNamespace: the jail's processes are gone, not just killed, when Destroy returns.
		inNamespace bool
	}{
		{"bwrap", hardened, true},
		{"direct", NewDirect(), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			tok := sleepToken()
			started := make(chan struct{})
			out := &markerWriter{marker: "started", fn: func() { close(started) }}
			spec := &Spec{Argv: bash("sleep " + tok + " & echo started; wait"), WorkDir: testDir(t, hardened, true), Stdout: out}
			h, err := c.jail.Start(context.Background(), spec)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-started:
			case <-time.After(60 * time.Second):
				t.Fatal("the command did not start")
			}
			h.End(7)
			var res *Result
			select {
			case res = <-h.Wait(context.Background()):
			case <-time.After(60 * time.Second):
				t.Fatal("an ended run delivered no result")
			}
			if res.ExitCode != 7 || res.TimedOut || res.Canceled || res.Limit != "" {
				t.Fatalf("result %+v, want exit code 7 and nothing else", res)
			}
			destroyed := make(chan struct{})
			go func() { h.Destroy(); close(destroyed) }()
			select {
			case <-destroyed:
			case <-time.After(60 * time.Second):
				t.Fatal("the tree of an ended run was not torn down")
			}
			if c.inNamespace {
				if pids := liveProcs(t, "sleep", tok); len(pids) > 0 {
					t.Fatalf("sleep %s still runs after Destroy: %v", tok, pids)
				}
			} else {
				waitGone(t, "sleep", tok)
			}
			if b, ok := c.jail.(*Bwrap); ok && b.Cgroups().Version() != CgroupNone {
				if left := runGroups(t, b.Cgroups()); len(left) > 0 {
					t.Fatalf("cgroups left after Destroy: %v", left)
				}
			}
			h.Destroy() // a second time: at once
		})
	}
}

// Wait with a context that ends first closes its channel without a result, and does not end
// the run; Kill does, and the result says Canceled.
func TestWaitAndKill(t *testing.T) {
	b := newTestBwrap(t)
	h, err := b.Start(context.Background(), &Spec{Argv: []string{"sleep", "1000"}, WorkDir: testDir(t, b, true)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Destroy()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if res, ok := <-h.Wait(ctx); ok {
		t.Fatalf("Wait delivered %+v for a run still going", res)
	}
	h.Kill()
	select {
	case res := <-h.Wait(context.Background()):
		if !res.Canceled || res.ExitCode != -1 {
			t.Fatalf("result %+v, want Canceled and exit code -1", res)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("a killed run delivered no result")
	}
}
