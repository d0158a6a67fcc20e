package sandbox

import (
	"context"
	"testing"
	"time"
)

// A run ended through Spec.Finished returns the code it was given while its tree still runs,
// then kills the tree: Teardown closes once it is gone and, for a hardened jail, its cgroup
// removed. The command here would never end on its own.
func TestFinishedReturnsBeforeTeardown(t *testing.T) {
	hardened := newTestBwrap(t)
	for _, c := range []struct {
		name string
		jail Jail
		// inNamespace: the jail's processes are gone, not just killed, when Teardown closes.
		inNamespace bool
	}{
		{"bwrap", hardened, true},
		{"direct", NewDirect(), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			tok := sleepToken()
			finished := make(chan int, 1)
			out := &markerWriter{marker: "started", fn: func() { finished <- 7 }}
			spec := &Spec{Argv: bash("sleep " + tok + " & echo started; wait"), WorkDir: testDir(t, hardened, true),
				Stdout: out, Finished: finished}
			res, err := c.jail.Run(context.Background(), spec)
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != 7 || res.TimedOut || res.Canceled || res.Limit != "" {
				t.Fatalf("result %+v, want exit code 7 and nothing else", res)
			}
			select {
			case <-res.Teardown:
			case <-time.After(60 * time.Second):
				t.Fatal("the tree of a finished run was not torn down")
			}
			if c.inNamespace {
				if pids := liveProcs(t, "sleep", tok); len(pids) > 0 {
					t.Fatalf("sleep %s still runs after the teardown: %v", tok, pids)
				}
			} else {
				waitGone(t, "sleep", tok)
			}
			if b, ok := c.jail.(*Bwrap); ok && b.Cgroups().Version() != CgroupNone {
				if left := runGroups(t, b.Cgroups()); len(left) > 0 {
					t.Fatalf("cgroups left after the teardown: %v", left)
				}
			}
		})
	}
}
