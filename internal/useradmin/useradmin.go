// Package useradmin is `host users`: it adds, lists and removes the users of the people store
// and issues their login tokens, records every act (refused ones too) in the audit stream, and
// says how a user's NATS login stands with the NATS server that must enforce it. The store
// refuses what it must not hold (an unknown role, a duplicate, the last admin removed, a short
// token); this package adds what only the CLI knows: who is acting, and the NATS side.
package useradmin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/audit"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/people"
)

// Admin changes the users on behalf of Who, seen from Face.
type Admin struct {
	Store *people.Store
	JS    jetstream.JetStream
	// Who is recorded as the actor: the operator's identity and how it logged in,
	// "root@vm (hosts credentials)".
	Who  string
	Face string
	// Log hears what cannot fail an act: an audit entry that could not be written.
	Log *zap.Logger
}

// Open opens the users' store and makes sure the audit stream exists. An existing audit
// stream is left as the hosts made it: this side does not know their replicas, and an update
// would change them.
func Open(ctx context.Context, js jetstream.JetStream, who, face string, log *zap.Logger) (*Admin, error) {
	if _, err := js.Stream(ctx, audit.Stream); errors.Is(err, jetstream.ErrStreamNotFound) {
		if err := audit.Ensure(ctx, js, 1); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, fmt.Errorf("open the audit stream %s: %w", audit.Stream, err)
	}
	store, err := people.Open(ctx, js, 0)
	if err != nil {
		return nil, err
	}
	return &Admin{Store: store, JS: js, Who: who, Face: face, Log: log}, nil
}

// NewUser is what `host users add` asks for.
type NewUser struct {
	Name      string
	Role      string
	Groups    []string
	Functions string
	NATS      bool
	// Topics are subjects (or MQTT topic filters) its NATS login may use (people.User.Topics).
	Topics []string
}

func (n NewUser) detail() string {
	parts := []string{"role " + n.Role}
	if len(n.Groups) > 0 {
		parts = append(parts, "groups "+strings.Join(n.Groups, ","))
	}
	if n.Functions != "" {
		parts = append(parts, "functions "+n.Functions)
	}
	if n.NATS {
		parts = append(parts, "NATS login")
	}
	if len(n.Topics) > 0 {
		parts = append(parts, "topics "+strings.Join(n.Topics, ","))
	}
	return strings.Join(parts, "; ")
}

// Add stores a user and issues its first login token, which it returns: the only time it is
// seen. A refused user is not stored; a token that could not be issued takes the user back out.
func (a *Admin) Add(ctx context.Context, n NewUser) (people.User, string, error) {
	u, token, err := a.add(ctx, n)
	a.record(ctx, "user.add", n.Name, n.detail(), err)
	return u, token, err
}

func (a *Admin) add(ctx context.Context, n NewUser) (people.User, string, error) {
	role, err := people.ParseRole(n.Role)
	if err != nil {
		return people.User{}, "", fmt.Errorf("add user %s: %w", n.Name, err)
	}
	if why := bus.ReservedLogin(n.Name); why != "" && n.NATS {
		return people.User{}, "", fmt.Errorf("add user %s --nats: %s; choose another name", n.Name, why)
	}
	u, err := a.Store.Add(ctx, people.User{Name: n.Name, Role: role, Groups: n.Groups, Functions: n.Functions, NATS: n.NATS, Topics: n.Topics, CreatedBy: a.Who})
	if err != nil {
		return people.User{}, "", err
	}
	token, err := a.Store.SetToken(ctx, n.Name, "")
	if err != nil {
		if _, rerr := a.Store.Remove(ctx, n.Name); rerr != nil {
			return u, "", fmt.Errorf("user %s was added but its token could not be issued (%w), and removing it again failed (%v): issue one with `host users token %s`", n.Name, err, rerr, n.Name)
		}
		return people.User{}, "", fmt.Errorf("add user %s: its token could not be issued, so it was not kept: %w", n.Name, err)
	}
	return a.reload(ctx, u), token, nil
}

// reload reads u as stored (with its token's hashes); u itself when that fails.
func (a *Admin) reload(ctx context.Context, u people.User) people.User {
	us, err := a.Store.Load(ctx)
	if err != nil {
		return u
	}
	if stored, ok := us.ByName[u.Name]; ok {
		return stored
	}
	return u
}

// Remove removes a user; its web and NATS logins stop working.
func (a *Admin) Remove(ctx context.Context, name string) (people.User, error) {
	u, err := a.Store.Remove(ctx, name)
	a.record(ctx, "user.rm", name, "", err)
	return u, err
}

// Token gives a user a new login token, chosen ("" makes a random one), and returns it; the
// old one stops working.
func (a *Admin) Token(ctx context.Context, name, chosen string) (string, people.User, error) {
	detail := "token issued"
	if chosen != "" {
		detail = "token chosen by the operator"
	}
	token, err := a.Store.SetToken(ctx, name, chosen)
	a.record(ctx, "user.token", name, detail, err)
	if err != nil {
		return "", people.User{}, err
	}
	return token, a.reload(ctx, people.User{Name: name}), nil
}

// List lists the users by name.
func (a *Admin) List(ctx context.Context) ([]people.User, error) {
	us, err := a.Store.Load(ctx)
	if err != nil {
		return nil, err
	}
	return us.Sorted(), nil
}

// record appends an act to the audit stream. The act has happened (or was refused) either
// way: a record that could not be written is said in the log, and does not fail the act.
func (a *Admin) record(ctx context.Context, act, target, detail string, actErr error) {
	e := audit.Entry{Who: a.Who, Face: a.Face, Act: act, Target: target, Detail: detail}
	if actErr != nil {
		e.Error = actErr.Error()
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := audit.Append(ctx, a.JS, e); err != nil {
		a.Log.Warn("the act is done, but its audit record could not be written", zap.String("act", act), zap.String("target", target), zap.Error(err))
	}
}
