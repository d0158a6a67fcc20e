package useradmin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/people"
	"github.com/agenthost/host/internal/presence"
)

// Listed is a user as `host users ls` shows it: never a hash of its token.
type Listed struct {
	Name      string      `json:"name"`
	Role      people.Role `json:"role"`
	Groups    []string    `json:"groups,omitempty"`
	Functions string      `json:"functions,omitempty"`
	NATS      bool        `json:"nats"`
	Topics    []string    `json:"topics,omitempty"`
	Token     bool        `json:"token"`
	TokenAt   time.Time   `json:"token_at,omitzero"`
	Created   time.Time   `json:"created"`
	CreatedBy string      `json:"created_by,omitempty"`
}

// View is how u is listed.
func View(u people.User) Listed {
	return Listed{Name: u.Name, Role: u.Role, Groups: u.Groups, Functions: u.Functions, NATS: u.NATS, Topics: u.Topics, Token: u.TokenHash != "",
		TokenAt: u.TokenAt, Created: u.Created, CreatedBy: u.CreatedBy}
}

// Functions lists the functions the live hosts announce now; none when no host ever did.
func (a *Admin) Functions(ctx context.Context) ([]string, error) {
	board, err := presence.Bind(ctx, a.JS)
	if errors.Is(err, presence.ErrNoHosts) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	entries, err := board.List(ctx, "")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Function)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// NATSConfig is the nats-server `authorization` block of the named users' NATS logins (every
// user that has one when names is empty), for an operator who runs the NATS: the globs of
// --functions expanded against the functions the hosts serve now, so a function added later
// takes printing it again. It refuses a named user without a NATS login or without a token.
func (a *Admin) NATSConfig(ctx context.Context, names ...string) (string, error) {
	us, err := a.Store.Load(ctx)
	if err != nil {
		return "", err
	}
	if len(names) > 0 {
		picked := people.Users{ByName: map[string]people.User{}}
		for _, n := range names {
			u, ok := us.ByName[n]
			switch {
			case !ok:
				return "", fmt.Errorf("user %s: %w (`host users ls` lists them)", n, people.ErrNotFound)
			case !u.NATS:
				return "", fmt.Errorf("user %s has no NATS login: it was added without --nats (remove it and add it again with --nats)", n)
			case u.NATSHash == "":
				return "", fmt.Errorf("user %s has no token yet: issue one with `host users token %s`", n, n)
			}
			picked.ByName[n] = u
		}
		us = picked
	}
	fns, err := a.Functions(ctx)
	if err != nil {
		return "", err
	}
	users, _ := bus.NATSUsers(us, fns)
	var b strings.Builder
	b.WriteString("# The users' NATS logins (host users nats-config), for a nats-server you run: put the entries\n")
	b.WriteString("# in its authorization block (or in the users of the account the hosts use), then reload it\n")
	b.WriteString("# (nats-server --signal reload). Passwords are bcrypt hashes of the users' tokens.\n")
	fmt.Fprintf(&b, "# --functions globs are expanded against the functions served now (%s): print it again when they change.\n", listOrNone(fns))
	b.WriteString(bus.UsersConfig(users))
	return b.String(), nil
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// LoginCheck says how a user's NATS login stands with the server the CLI is connected to.
type LoginCheck struct {
	// InEffect says the server took the login: it enforces the user's rights now.
	InEffect bool
	// Say is the sentence for the operator.
	Say string
}

// CheckLogin finds out whether the NATS server at url enforces name's login: one that lets
// anyone in (authRequired false) does not; one that requires authorization does once it takes
// the login, which try attempts, for up to within (hosts that serve with --nats-auth install
// it within moments of the change); otherwise it is an external NATS whose operator installs
// the login, or hosts that do not follow the users.
func CheckLogin(ctx context.Context, name, url string, authRequired bool, within time.Duration, try func(context.Context) error) LoginCheck {
	if !authRequired {
		return LoginCheck{Say: fmt.Sprintf("the NATS login of %s is stored but not enforced: the NATS server at %s takes connections without authorization (a host serving without --nats-auth), so anyone there may do anything. "+
			"It takes effect on hosts serving with --nats-auth, or on a NATS you run, with the block below in its configuration (`host users nats-config` prints it again)", name, url)}
	}
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var err error
	for {
		if err = try(ctx); err == nil {
			return LoginCheck{InEffect: true, Say: fmt.Sprintf("the NATS login of %s is in effect on %s: the server took it, and holds it to its role", name, url)}
		}
		select {
		case <-ctx.Done():
			return LoginCheck{Say: fmt.Sprintf("the NATS server at %s did not take the login of %s within %s (%v): it is a NATS you run (install the block below in its configuration and reload it: nats-server --signal reload), "+
				"or its hosts serve without --nats-auth's embedded server", url, name, within, err)}
		case <-time.After(200 * time.Millisecond):
		}
	}
}
