package webauth

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/people"
)

// UserSource is where the guard learns the stored users: people.Store is one. Watch sends the
// users as they are, then again on every change.
type UserSource interface {
	Watch(ctx context.Context) (<-chan people.Users, error)
}

// Users is the guard's copy of the stored users, kept by following the store: a request is
// checked against memory, never a read of the store, and a change (a user removed, a role or
// groups changed, a token rotated) applies to the next request of every session.
type Users struct {
	log *zap.Logger

	mu     sync.RWMutex
	us     people.Users
	loaded chan struct{} // closed once the first copy arrived
	once   sync.Once
}

// watchRetry is how long Users waits before watching again when a watch ended while the host
// still runs (it keeps the last copy meanwhile).
const watchRetry = 2 * time.Second

// FollowUsers keeps a copy of src's users until ctx ends. Ready says when the first copy has
// arrived; until then only the host's web token logs in.
func FollowUsers(ctx context.Context, src UserSource, log *zap.Logger) *Users {
	if log == nil {
		log = zap.NewNop()
	}
	u := &Users{log: log, loaded: make(chan struct{}), us: people.Users{ByName: map[string]people.User{}}}
	go u.follow(ctx, src)
	return u
}

// StaticUsers is a copy that never changes, for tests and embedders without a store.
func StaticUsers(us people.Users) *Users {
	u := &Users{log: zap.NewNop(), loaded: make(chan struct{})}
	u.set(us)
	return u
}

func (u *Users) follow(ctx context.Context, src UserSource) {
	for ctx.Err() == nil {
		ch, err := src.Watch(ctx)
		if err != nil {
			u.log.Warn("cannot follow the users: user logins use the last copy until the watch is back", zap.Error(err))
		} else {
			for us := range ch {
				u.set(us)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(watchRetry):
		}
	}
}

func (u *Users) set(us people.Users) {
	if us.ByName == nil {
		us.ByName = map[string]people.User{}
	}
	u.mu.Lock()
	before := len(u.us.ByName)
	u.us = us
	u.mu.Unlock()
	u.once.Do(func() { close(u.loaded) })
	u.log.Debug("users loaded", zap.Int("users", len(us.ByName)), zap.Int("before", before))
}

// Ready waits for the first copy of the users, or for ctx to end.
func (u *Users) Ready(ctx context.Context) error {
	select {
	case <-u.loaded:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the users (bucket %s) did not load: %w; is JetStream up?", people.Bucket, ctx.Err())
	}
}

// Load returns the users as the guard knows them: the dashboard's Users page reads them here.
func (u *Users) Load(ctx context.Context) (people.Users, error) {
	if err := u.Ready(ctx); err != nil {
		return people.Users{}, err
	}
	u.mu.RLock()
	defer u.mu.RUnlock()
	return u.us, nil
}

// byName finds a stored user.
func (u *Users) byName(name string) (people.User, bool) {
	if u == nil {
		return people.User{}, false
	}
	u.mu.RLock()
	defer u.mu.RUnlock()
	us, ok := u.us.ByName[name]
	return us, ok
}

// byToken finds the user whose login token is token.
func (u *Users) byToken(token string) (people.User, bool) {
	if u == nil || len(token) < people.MinTokenLen {
		return people.User{}, false
	}
	u.mu.RLock()
	defer u.mu.RUnlock()
	return u.us.ByToken(token)
}

// errEnded is a session that the users' changes ended; its text says which change.
type errEnded struct{ reason string }

func (e *errEnded) Error() string { return e.reason }

// principal is who a live session is now: the operator, or its user as the store says at this
// moment, which is how a removal, a new role or a rotated token reaches a session at its next
// request. An error ends the session.
func (g *Guard) principal(s *session, how string) (people.Principal, error) {
	switch s.via {
	case "":
		return operator(how), nil
	case viaToken:
		u, ok := g.cfg.Users.byName(s.user)
		switch {
		case !ok:
			return people.Principal{}, &errEnded{fmt.Sprintf("user %s was removed, which ended this login", s.user)}
		case u.TokenHash != s.tokenHash:
			return people.Principal{}, &errEnded{fmt.Sprintf("the token of user %s was changed, which ended the logins made with the old one: log in with the new token", s.user)}
		}
		return u.Principal(viaToken), nil
	case viaOIDC:
		// A stored user of the name the provider vouched for wins: its role, groups and
		// functions are what the team set for that person.
		if u, ok := g.cfg.Users.byName(s.user); ok {
			return u.Principal(viaOIDC), nil
		}
		if s.stored {
			return people.Principal{}, &errEnded{fmt.Sprintf("user %s was removed, which ended this login", s.user)}
		}
		return s.claims, nil
	}
	return people.Principal{}, errors.New("unknown session kind")
}

// operator is the principal of the host's web token: how names the login, as the records of its
// acts do ("admin (login session 1b9d…)").
func operator(how string) people.Principal {
	return people.Operator("admin ("+how+")", how)
}
