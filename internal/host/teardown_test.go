package host_test

import (
	"context"
	"testing"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// A run that answered before its jail was gone (jobtype.Outcome.Teardown) is settled at once, but
// its slot stays taken until the teardown ends: with concurrency 1, the next message is not
// even fetched meanwhile, so --concurrency bounds live jails, not answers.
func TestEngineSlotHeldUntilTeardown(t *testing.T) {
	first := make(chan struct{}) // the first run's teardown
	sawFirstGone := make(chan bool, 1)
	runs := 0
	fake := newFake().on("slow", func(context.Context, *jobtype.Job) *jobtype.Outcome {
		runs++ // one run at a time: concurrency 1
		if runs == 1 {
			return &jobtype.Outcome{Result: []byte(`"one"`)}
		}
		select {
		case <-first:
			sawFirstGone <- true
		default:
			sawFirstGone <- false
		}
		return &jobtype.Outcome{Result: []byte(`"two"`)}
	})
	starts := 0
	fake.tornDown = func(string, *jobtype.Job) <-chan struct{} {
		if starts++; starts == 1 {
			return first
		}
		return nil
	}
	h := hosttest.NewEngine(t, map[string]string{"slow.sh": "# concurrency: 1\necho\n"}, fake)

	// The caller hears while the jail is still being torn down.
	if reply := h.Call("slow", `{}`); string(reply.Data) != `"one"` {
		t.Fatalf("first reply %s", reply.Data)
	}
	if err := h.NC.Publish(bus.RunSubject("slow"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	cons := consumer(t, h, "slow")
	natstest.Eventually(t, "the second message waits, undelivered, while the first jail is torn down", func() bool {
		info, err := cons.Info(context.Background())
		return err == nil && info.NumPending == 1 && info.NumAckPending == 0
	})
	if n := fake.count("slow"); n != 1 {
		t.Fatalf("%d runs started before the first jail was gone, want 1", n)
	}
	close(first)
	if !<-sawFirstGone {
		t.Fatal("the second run started before the first run's teardown ended")
	}
	settled(t, h, "slow")
}
