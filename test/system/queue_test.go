package system_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// TestQueueLimitRefusesCalls: agent.call (and so an MCP tool call) is refused past a function's
// queue: limit, as host invoke and POST /run are, with what to do; another function is not held.
func TestQueueLimitRefusesCalls(t *testing.T) {
	h := hosttest.New(t, map[string]string{
		"slow.sh": "# queue: 2\n# concurrency: 1\nsleep 2\necho '\"done\"'\n",
		"calm.sh": "echo '\"calm\"'\n",
	})
	h.Publish(bus.RunSubject("slow"), `{}`, nil)
	h.Publish(bus.RunSubject("slow"), `{}`, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(h.NC)
	if err != nil {
		t.Fatal(err)
	}
	h.Eventually("slow holds two triggers", func() bool {
		s, err := js.Stream(ctx, bus.RunStream)
		if err != nil {
			return false
		}
		c, err := s.Consumer(ctx, bus.ConsumerName("slow"))
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.NumPending+uint64(info.NumAckPending) == 2
	})
	e := hosttest.Decode[jobs.ErrorEvent](t, h.Call("slow", `{}`).Data)
	if !strings.Contains(e.Error, "queue: 2") || !strings.Contains(e.Error, "nothing was queued") {
		t.Fatalf("a call past the queue: limit got %+v; want the refusal", e)
	}
	if got := hosttest.Decode[string](t, h.Call("calm", `{}`).Data); got != "calm" {
		t.Fatalf("another function: %q", got)
	}
}
