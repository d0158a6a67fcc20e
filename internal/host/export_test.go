package host

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// ConsumerGone asks what the fetch loop asks after a fetch that failed for no stated reason;
// the external tests ask it against hosttest's server.
func ConsumerGone(ctx context.Context, nc *nats.Conn, cons jetstream.Consumer) error {
	h := &Host{nc: nc, log: zap.NewNop()}
	return h.consumerGone(ctx, &served{consumer: cons})
}

// StopJob stops a running job on purpose, as a cancel command will.
func (h *Host) StopJob(id string, cause error) bool { return h.stopJob(id, cause) }

// DeafToCancels stops the host answering cancel requests, as a host too slow to answer within
// a cancel's wait would look to `host cancel`; the jobs it runs go on.
func (h *Host) DeafToCancels() error { return h.cancels.Unsubscribe() }
