package host_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// TestAnIdleFunctionWaitsWithOnePull: a function of four slots waits with one pull while it
// has nothing to do (each waiting pull costs the server and the host a heartbeat every few
// seconds), and a burst still fills every slot: the first message wakes the other three.
func TestAnIdleFunctionWaitsWithOnePull(t *testing.T) {
	release := make(chan struct{})
	started := make(chan string, 8)
	fake := newFake().on("slow", func(ctx context.Context, j *jobtype.Job) *jobtype.Outcome {
		started <- j.ID
		select {
		case <-release:
		case <-ctx.Done():
		}
		return &jobtype.Outcome{Result: []byte(`"ok"`)}
	})
	h := hosttest.NewEngine(t, map[string]string{"slow.sh": "# concurrency: 4\necho\n"}, fake)
	cons := consumer(t, h, "slow")
	waiting := func() int {
		info, err := cons.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return info.NumWaiting
	}
	h.Eventually("one pull waiting for the idle function", func() bool { return waiting() == 1 })

	for i := range 4 {
		h.Publish(bus.RunSubject("slow"), "{}", map[string]string{bus.HeaderMsgID: fmt.Sprintf("burst-%d", i)})
	}
	for i := range 4 {
		select {
		case <-started: // all four run at once: the sleeping slots woke
		case <-time.After(time.Minute): // a safety net, not the time this takes
			t.Fatalf("only %d of 4 jobs started while every slot was free: the sleeping slots did not wake", i)
		}
	}
	info, err := cons.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 4 {
		t.Errorf("%d jobs held at once, want 4 (one per slot)", info.NumAckPending)
	}
	close(release)
	settled(t, h, "slow")
	if n := fake.count("slow"); n != 4 {
		t.Errorf("%d runs, want 4", n)
	}
}
