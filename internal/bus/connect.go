package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/retry"
)

// ConnectOptions say where and how to connect.
type ConnectOptions struct {
	// URL of the NATS server(s), comma separated. Ignored when InProcess is set.
	URL string
	// Creds is a NATS credentials file.
	Creds string
	// User and Password authenticate without a credentials file (`serve --nats-auth`, or a
	// nats-server configuration with users).
	User, Password string
	// Name shows up in the server's connection list.
	Name string
	// InProcess connects to an embedded server without a socket.
	InProcess *server.Server
	// MaxWait bounds how long the first connection is retried; 0 means one try.
	MaxWait time.Duration
	// Options come before Creds, User and Password: what a NATS CLI context sets (TLS, nkey,
	// token, inbox prefix; LoadedContext.Options).
	Options []nats.Option
	// OnDenied, when set, hears every permission violation the server reports to the
	// connection (nats.ErrPermissionViolation in its chain): a refused publish is reported only
	// that way, while the request that made it waits for its timeout.
	OnDenied func(err error)
}

// Connect dials NATS, retrying the first connection with exponential backoff for up to MaxWait,
// and keeps reconnecting forever afterwards with backoff between attempts.
//
// It is how the host and its CLI connect, so the connection's inboxes are under
// HostsInboxPrefix, out of every caller's reach; a context that sets its own inbox prefix
// (Options) replaces it, as that context's permissions are then built around that one.
func Connect(ctx context.Context, o ConnectOptions, log *zap.Logger) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(o.Name),
		nats.CustomInboxPrefix(HostsInboxPrefix),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(reconnectDelay()),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("disconnected from NATS; reconnecting", zap.Error(err))
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("reconnected to NATS", zap.String("url", nc.ConnectedUrlRedacted()))
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			if o.OnDenied != nil && errors.Is(err, nats.ErrPermissionViolation) {
				o.OnDenied(err)
			}
			log.Warn("NATS async error", zap.String("subject", subject), zap.Error(err))
		}),
	}
	opts = append(opts, o.Options...)
	if o.Creds != "" {
		opts = append(opts, nats.UserCredentials(o.Creds))
	}
	if o.User != "" {
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	}
	url := o.URL
	switch {
	case o.InProcess != nil && authRequired(o.InProcess):
		// A refused CONNECT deadlocks the in-process pipe (the server writes its -ERR while the
		// client writes its PING) and surfaces as a closed pipe, retried for MaxWait. Over the
		// socket a wrong password is an authorization error, reported at once.
		url = o.InProcess.ClientURL()
	case o.InProcess != nil:
		opts = append(opts, nats.InProcessServer(o.InProcess))
		url = ""
	case url == "":
		url = nats.DefaultURL
	}

	tries := []backoff.RetryOption{}
	if o.MaxWait <= 0 {
		tries = append(tries, backoff.WithMaxTries(1))
	}
	attempt := 0
	nc, err := retry.Do(ctx, retry.Connect.Within(o.MaxWait), func() (*nats.Conn, error) {
		attempt++
		nc, err := nats.Connect(url, opts...)
		if err != nil {
			if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) {
				return nil, backoff.Permanent(err)
			}
			if o.MaxWait > 0 {
				log.Warn("cannot reach NATS yet; retrying", zap.String("url", url), zap.Int("attempt", attempt), zap.Error(err))
			}
			return nil, err
		}
		return nc, nil
	}, tries...)
	if err != nil {
		if errors.Is(err, nats.ErrAuthorization) {
			return nil, fmt.Errorf("connect to NATS at %s: %w (pass credentials: --creds, --user and --password, or --context host, the context `host serve --nats-auth` writes)", displayURL(url), err)
		}
		return nil, fmt.Errorf("connect to NATS at %s: %w (is the server running? start one with `host serve`, or pass --nats / NATS_URL)", displayURL(url), err)
	}
	return nc, nil
}

func displayURL(url string) string {
	if url == "" {
		return "the embedded server"
	}
	return url
}

// reconnectDelay spaces reconnection attempts by retry.Reconnect; nats.go counts the attempts,
// so the schedule starts over with each outage.
func reconnectDelay() func(attempts int) time.Duration {
	return retry.Reconnect.Wait
}

func authRequired(s *server.Server) bool {
	v, err := s.Varz(nil)
	return err == nil && v.AuthRequired
}
