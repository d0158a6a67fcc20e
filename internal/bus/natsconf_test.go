package bus

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// The repository's nats.conf must stay a valid configuration that syncs every write.
func TestRepositoryNATSConfig(t *testing.T) {
	opts, err := server.ProcessConfigFile("../../nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	if !opts.JetStream || !opts.SyncAlways {
		t.Fatalf("nats.conf: jetstream %v, sync always %v", opts.JetStream, opts.SyncAlways)
	}
}
