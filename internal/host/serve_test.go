package host_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/host"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// TestConsumerGone checks the question the fetch loop asks after a fetch that failed for no
// stated reason (a missed heartbeat: the server's "consumer deleted" went down with a deleted
// stream), against a real server: only a consumer or stream that is really gone counts.
func TestConsumerGone(t *testing.T) {
	srv := natstest.Server(t, bus.ServerConfig{StoreDir: filepath.Join(t.TempDir(), "nats")}, zap.NewNop())
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		remove func(ctx context.Context, s jetstream.Stream) error
		want   error // nil: the consumer is there
	}{
		{"consumer there", func(context.Context, jetstream.Stream) error { return nil }, nil},
		{"consumer deleted", func(ctx context.Context, s jetstream.Stream) error {
			return s.DeleteConsumer(ctx, bus.ConsumerName("f"))
		}, jetstream.ErrConsumerNotFound},
		{"stream deleted", func(ctx context.Context, s jetstream.Stream) error {
			return js.DeleteStream(ctx, bus.RunStream)
		}, jetstream.ErrStreamNotFound},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			stream, err := bus.EnsureRunStream(ctx, js, nil, bus.StreamOptions{})
			if err != nil {
				t.Fatal(err)
			}
			cons, err := bus.EnsureConsumer(ctx, stream, "f", []string{"agent.run.f"}, 5*time.Second, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.remove(ctx, stream); err != nil {
				t.Fatal(err)
			}
			got := host.ConsumerGone(ctx, nc, cons)
			switch {
			case c.want == nil && got != nil:
				t.Errorf("consumerGone = %v, want nil: the consumer is there", got)
			case c.want != nil && !errors.Is(got, c.want):
				t.Errorf("consumerGone = %v, want %v", got, c.want)
			}
		})
	}
}
