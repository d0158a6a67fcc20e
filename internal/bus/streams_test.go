package bus_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// The log stream is not synced per write when the host makes it, and a stream made before
// keeps the persist mode it has (the server refuses to change it), so a host upgrade starts.
func TestLogStreamPersistMode(t *testing.T) {
	cases := []struct {
		name     string
		existing *jetstream.PersistModeType // the stream before the host ensures it; nil: none
		want     jetstream.PersistModeType
	}{
		{"new stream", nil, jetstream.AsyncPersistMode},
		{"stream of an older host", ptr(jetstream.DefaultPersistMode), jetstream.DefaultPersistMode},
		{"stream of this host", ptr(jetstream.AsyncPersistMode), jetstream.AsyncPersistMode},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			_, js := natstest.Start(t)
			if c.existing != nil {
				if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: bus.LogStream, Subjects: []string{bus.LogsPrefix + ">"}, PersistMode: *c.existing}); err != nil {
					t.Fatal(err)
				}
			}
			s, err := bus.EnsureLogStream(ctx, js, bus.StreamOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := s.CachedInfo().Config.PersistMode; got != c.want {
				t.Fatalf("persist mode %v, want %v", got, c.want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
