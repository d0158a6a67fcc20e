package app

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/people"
)

// followLogins makes the embedded server of `serve --nats-auth` enforce the users' NATS logins
// (host users add --nats): it follows the users' bucket and reloads the server's users with
// each change. With no embedded server (serve --nats) the NATS belongs to its operator, who
// installs the block `host users add --nats` prints; an embedded server without --nats-auth
// lets anyone in, so a login there would limit nothing: both only say so.
func followLogins(ctx context.Context, embedded *bus.Embedded, auth bool, nc *nats.Conn, h *Host, log *zap.Logger) error {
	log = log.Named("logins")
	switch {
	case embedded == nil:
		log.Debug("users' NATS logins are not installed by this host: it joined an external NATS, whose operator installs them (host users add --nats prints them)")
		return nil
	case !auth:
		log.Debug("users' NATS logins are not enforced: the embedded NATS server runs without --nats-auth")
		return nil
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("open JetStream for the users' NATS logins: %w", err)
	}
	store, err := people.Open(ctx, js, 0) // the embedded server is one node
	if err != nil {
		return err
	}
	l := &bus.Logins{Server: embedded, Users: store, Functions: h.ServedNames, Log: log}
	if err := l.Follow(ctx); err != nil {
		return fmt.Errorf("install the users' NATS logins on the embedded server: %w", err)
	}
	return nil
}
