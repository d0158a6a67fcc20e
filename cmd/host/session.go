package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/client"
)

// session is a CLI connection, the NATS user it logged in as, and the permission violations
// the server reported to it. A user's NATS login (host users add --nats) has only the rights
// of its role; a violation is reported by the server asynchronously while the request that
// caused it waits for its timeout, so the first one cancels the work in progress (guard) and
// becomes the command's error (explain), naming the subject and the login.
type session struct {
	nc    *nats.Conn
	login string // "" when not known (a creds file, nkey or token)

	mu     sync.Mutex
	denied *bus.DeniedError
	cancel context.CancelCauseFunc
}

// dial connects as the flags, the environment and the NATS CLI context say. A login other
// than the hosts' receives its replies under its own prefix, _INBOX_<user>, the only inbox
// a user's (or a caller's) permissions let it subscribe to. A context's inbox_prefix wins
// when the context's own credentials are used; --user brings its own prefix.
func (g *globals) dial(ctx context.Context) (*session, error) {
	s := &session{login: g.user}
	url := g.natsURL
	ownAuth := g.creds != "" || g.user != ""
	var ctxOpts []nats.Option
	if url == "" || g.context != "" {
		nctx, err := bus.LoadContext(g.context)
		if err != nil {
			return nil, err
		}
		if nctx != nil {
			url = nctx.URL
			if !ownAuth {
				s.login = nctx.User()
			}
			if ctxOpts, err = nctx.Options(ownAuth); err != nil {
				return nil, err
			}
		}
	}
	switch {
	case ownAuth && s.login != "":
		// The context's inbox prefix is its own user's: this login's is its own.
		prefix := bus.CallerInboxPrefix(s.login)
		if s.login == bus.HostsUser {
			prefix = bus.HostsInboxPrefix
		}
		ctxOpts = append(ctxOpts, nats.CustomInboxPrefix(prefix))
	case s.login != "" && s.login != bus.HostsUser:
		ctxOpts = append([]nats.Option{nats.CustomInboxPrefix(bus.CallerInboxPrefix(s.login))}, ctxOpts...)
	}
	if url == "" {
		url = nats.DefaultURL
	}
	nc, err := bus.Connect(ctx, bus.ConnectOptions{URL: url, Creds: g.creds, User: g.user, Password: g.password, Options: ctxOpts,
		Name: "host-cli", MaxWait: 2 * time.Second, OnDenied: s.onDenied}, zap.NewNop())
	if err != nil && errors.Is(err, nats.ErrAuthorization) && s.login != "" && s.login != bus.HostsUser && s.login != bus.CallersUser {
		return nil, fmt.Errorf("the NATS server refused the login %s: a wrong token, a user removed (or not added with --nats), or a NATS that does not know the users' logins (`host users ls`, with the hosts credentials, lists them): %w", s.login, err)
	}
	if err != nil {
		return nil, err
	}
	s.nc = nc
	return s, nil
}

func (s *session) onDenied(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.denied != nil {
		return
	}
	s.denied = bus.AsDenied(s.login, err)
	if s.cancel != nil {
		s.cancel(s.denied)
	}
}

// guard returns ctx, canceled at the first permission violation from now on.
func (s *session) guard(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	s.mu.Lock()
	s.denied, s.cancel = nil, cancel
	s.mu.Unlock()
	return ctx, func() {
		s.mu.Lock()
		s.cancel = nil
		s.mu.Unlock()
		cancel(nil)
	}
}

// Denied is the first permission violation since guard; nil when none.
func (s *session) Denied() *bus.DeniedError {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.denied
}

// explain is err, or the permission violation that caused it.
func (s *session) explain(err error) error {
	if err == nil {
		return nil
	}
	if d := s.Denied(); d != nil {
		return d
	}
	return err
}

// client opens the host's client on the session: the job records, through the JetStream API.
func (s *session) client(ctx context.Context) (*client.Client, error) {
	ctx, stop := s.guard(ctx)
	defer stop()
	c, err := client.New(ctx, s.nc)
	return c, s.explain(err)
}
