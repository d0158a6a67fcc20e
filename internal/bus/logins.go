package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/people"
)

// Embedded is an embedded nats-server StartEmbedded started, with the options it was started
// from, so that its users can be changed while it runs.
type Embedded struct {
	*server.Server

	mu   sync.Mutex
	base *server.Options // as started; never handed to the server
	auth *Auth
	log  *zap.Logger
}

// ErrNoGeneratedUsers is SetUsers' answer on a server without `--nats-auth`: with no
// authorization at all, a user's login would be one more way in, not a limit.
var ErrNoGeneratedUsers = errors.New("the embedded NATS server takes connections without authorization (serve without --nats-auth): user logins are not enforced on it")

// SetUsers makes the server's users the generated ones (hosts, callers) and extra, by a
// configuration reload: nats-server checks each connected client against the new users, closes
// the connections of a user no longer there or whose password no longer matches, and applies
// changed permissions to the others at once.
func (e *Embedded) SetUsers(extra []*server.User) error {
	if e.auth == nil {
		return ErrNoGeneratedUsers
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	opts := e.base.Clone()
	opts.Users = append(opts.Users, extra...)
	if err := e.ReloadOptions(opts); err != nil {
		return fmt.Errorf("reload the embedded NATS server's users: %w", err)
	}
	return nil
}

// UsersWatch is what FollowUsers reads the users from: people.Store.
type UsersWatch interface {
	Watch(ctx context.Context) (<-chan people.Users, error)
}

// Logins keeps an embedded server's users in step with the stored users' NATS logins.
type Logins struct {
	Server *Embedded
	Users  UsersWatch
	// Functions lists the functions the hosts serve, to expand the users' --functions globs;
	// nil is none. It is asked again every Every while some user has a glob, so that a new
	// function becomes runnable by the logins whose glob names it.
	Functions func(ctx context.Context) []string
	// Every is how often the functions are read again; 0 is 5s.
	Every time.Duration
	Log   *zap.Logger
}

// Follow reloads the server's users with every change of the stored users (and of the
// functions, for the logins a glob limits) until ctx ends. It returns once the first users are
// installed, or with the error that kept it from reading them.
func (l *Logins) Follow(ctx context.Context) error {
	if l.Server == nil || l.Server.auth == nil {
		return ErrNoGeneratedUsers
	}
	if l.Every <= 0 {
		l.Every = 5 * time.Second
	}
	ch, err := l.Users.Watch(ctx)
	if err != nil {
		return err
	}
	var us people.Users
	select {
	case us = <-ch:
	case <-ctx.Done():
		return ctx.Err()
	}
	last := ""
	l.apply(ctx, us, &last)
	go l.follow(ctx, ch, us, last)
	return nil
}

func (l *Logins) follow(ctx context.Context, ch <-chan people.Users, us people.Users, last string) {
	tick := time.NewTicker(l.Every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case u, ok := <-ch:
			if !ok {
				ch = l.rewatch(ctx)
				continue
			}
			us = u
		case <-tick.C:
			if !hasGlob(us) && last != "" {
				continue
			}
		}
		l.apply(ctx, us, &last)
	}
}

// rewatch watches the users again after the watch ended under a live ctx (NATS went away for
// long): until then the server keeps the logins it has.
func (l *Logins) rewatch(ctx context.Context) <-chan people.Users {
	for {
		l.Log.Warn("the users' watch ended; the NATS logins stay as they are until it is back")
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(l.Every):
		}
		if ch, err := l.Users.Watch(ctx); err == nil {
			return ch
		}
	}
}

// apply installs the logins of us unless they are those installed (*last); a failed reload is
// tried again on the next tick.
func (l *Logins) apply(ctx context.Context, us people.Users, last *string) {
	var fns []string
	if hasGlob(us) && l.Functions != nil {
		fns = l.Functions(ctx)
	}
	users, skipped := NATSUsers(us, fns)
	key := fingerprint(users)
	if key == *last {
		return
	}
	start := time.Now()
	if err := l.Server.SetUsers(users); err != nil {
		l.Log.Error("NATS user logins not reloaded; the server keeps the previous ones", zap.Error(err))
		*last = "" // try again on the next tick
		return
	}
	*last = key
	names := make([]string, len(users))
	for i, u := range users {
		names[i] = u.Username
	}
	fields := []zap.Field{zap.Int("users", len(users)), zap.Strings("logins", names), zap.Duration("took", time.Since(start))}
	if len(skipped) > 0 {
		fields = append(fields, zap.Strings("without_login", skipped))
	}
	l.Log.Info("NATS user logins reloaded", fields...)
}

func hasGlob(us people.Users) bool {
	for _, u := range us.ByName {
		if u.NATS && u.Functions != "" && u.Functions != "*" {
			return true
		}
	}
	return false
}

// fingerprint is what a reload would install, to skip one that changes nothing.
func fingerprint(users []*server.User) string {
	var b strings.Builder
	for _, u := range users {
		b.WriteString(u.Username + "\x00" + u.Password)
		if p := u.Permissions; p != nil {
			for _, sp := range []*server.SubjectPermission{p.Publish, p.Subscribe} {
				if sp != nil {
					b.WriteString("\x00" + strings.Join(slices.Concat(sp.Allow, []string{"|"}, sp.Deny), " "))
				}
			}
		}
		b.WriteString("\n")
	}
	return "v1\n" + b.String()
}
