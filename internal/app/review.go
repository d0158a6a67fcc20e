package app

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/host"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/objstore"
	"github.com/agenthost/host/internal/review"
)

// serveReviews answers `host approvals show` (review.Server) from this host's volume store
// until it shuts down.
func serveReviews(h *host.Host, nc *nats.Conn, volumes *objstore.Volumes, hostID string, log *zap.Logger) error {
	recs := &client.Lazy{NC: nc} // the job bucket may not exist before the engine starts
	srv := &review.Server{Volumes: volumes, HostID: hostID, Log: log.Named("review"),
		Record: func(ctx context.Context, id string) (*jobs.Record, error) {
			c, err := recs.Get(ctx)
			if err != nil {
				return nil, err
			}
			return c.Jobs.Get(ctx, id)
		}}
	subs, err := srv.Serve(nc)
	if err != nil {
		return err
	}
	h.AtShutdown(func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	})
	return nil
}
