package app

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/host"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/s3events"
)

// eventRouters are the routers of the event sources that name no function (S3 bucket
// notifications); start runs them once the engine exists, until it shuts down.
func eventRouters(cfg Config, js jetstream.JetStream, msgIDs ids.Key, log *zap.Logger) (routers []host.EventRouter, start func(h *host.Host)) {
	s3 := &s3events.Router{JS: js, Subject: cfg.S3EventsSubject, IDs: msgIDs, Streams: cfg.Streams, AckWait: cfg.AckWait, Log: log.Named("s3events")}
	return []host.EventRouter{s3}, func(h *host.Host) {
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		h.AtShutdown(func() { stop(); <-done })
		go func() {
			defer close(done)
			if err := s3.Run(ctx); err != nil {
				log.Error("S3 bucket notifications are not routed", zap.Error(err))
			}
		}()
	}
}
