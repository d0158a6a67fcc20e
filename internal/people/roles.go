// Package people is who may do what: the users a team keeps in JetStream, their roles and
// groups, and the Principal every face (web, CLI, NATS) authenticates a request as. It is a
// leaf: faces ask it whether a principal may act, and the store refuses an illegal change
// (a duplicate, an unknown role, the last admin removed) against the version it holds.
package people

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
)

// Role is what a user may do. Each role includes every role before it.
type Role int

// The roles, least first.
const (
	// Viewer reads jobs, flows, logs and functions; never a secret's value.
	Viewer Role = iota + 1
	// Runner runs functions (those its Functions glob names), cancels and replays their jobs.
	Runner
	// Approver decides the approvals of its groups.
	Approver
	// Developer manages webhooks, schedules and deployments.
	Developer
	// Admin manages secrets, users and volume restores.
	Admin
)

var roleNames = []string{"", "viewer", "runner", "approver", "developer", "admin"}

// Roles names every role, least first.
func Roles() []string { return slices.Clone(roleNames[1:]) }

func (r Role) String() string {
	if r < Viewer || r > Admin {
		return fmt.Sprintf("role(%d)", int(r))
	}
	return roleNames[r]
}

// ParseRole reads a role's name.
func ParseRole(s string) (Role, error) {
	if i := slices.Index(roleNames, strings.ToLower(strings.TrimSpace(s))); i > 0 {
		return Role(i), nil
	}
	return 0, fmt.Errorf("unknown role %q: it is one of %s", s, strings.Join(Roles(), ", "))
}

// MarshalText writes the role's name, so records and JSON say "approver", not 3.
func (r Role) MarshalText() ([]byte, error) {
	if r < Viewer || r > Admin {
		return nil, fmt.Errorf("no such role %d", int(r))
	}
	return []byte(r.String()), nil
}

// UnmarshalText reads a role's name.
func (r *Role) UnmarshalText(b []byte) error {
	v, err := ParseRole(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// Act is something a principal asks to do.
type Act int

// The acts the faces check, with the least role each needs (acts below).
const (
	// Read is reading jobs, flows, logs, functions, the wiring, dead letters' records.
	Read Act = iota + 1
	// Run is running a function, re-running a job, cancelling or replaying a job of it.
	Run
	// Decide is approving or rejecting a waiting step.
	Decide
	// Develop is adding or removing webhooks and schedules, and deploying code.
	Develop
	// Administer is setting secrets, managing users, restoring volumes, reading the audit.
	Administer
	// Edit is the dashboard's editor: checking a draft, test-running it in a jail, and
	// deploying it (or writing it into the served directory).
	Edit
)

// acts is the one table of what each act needs.
var acts = map[Act]struct {
	role Role
	name string
}{
	Read:       {Viewer, "read"},
	Run:        {Runner, "run functions"},
	Decide:     {Approver, "decide approvals"},
	Develop:    {Developer, "manage webhooks, schedules and deployments"},
	Administer: {Admin, "manage secrets, users and volumes"},
	Edit:       {Developer, "edit, test-run and deploy functions"},
}

func (a Act) String() string { return acts[a].name }

// Needs is the least role that may do a.
func (a Act) Needs() Role { return acts[a].role }

// ErrForbidden is in the chain of every refusal of a principal's act.
var ErrForbidden = errors.New("forbidden")

// Principal is who a face authenticated a request as: a user of the store, a person an
// OpenID provider vouched for, or the operator (the web token, the hosts' NATS credentials).
type Principal struct {
	// Name is the user's name, or what the face knows of the operator ("admin (web token)").
	Name string `json:"name"`
	// User says Name is a person's (a stored user or an OpenID login): the self-approval rule
	// and approval.by use it. False for the operator's credentials.
	User bool `json:"user,omitempty"`
	Role Role `json:"role"`
	// Groups are the groups approve: ... by names.
	Groups []string `json:"groups,omitempty"`
	// Functions narrows Run to the functions whose names match this glob (path.Match); "" is
	// every function.
	Functions string `json:"functions,omitempty"`
	// Via is how the face authenticated it: "token", "oidc", "web token", "nats login", "cli".
	Via string `json:"via,omitempty"`
}

// Operator is the single-operator login: the web token, or the hosts' NATS credentials. It may
// do everything an admin may, and is no person: it is never "the same person" as a flow's
// starter, and is recorded as name.
func Operator(name, via string) Principal {
	return Principal{Name: name, Role: Admin, Via: via}
}

// May says whether p may do a, to function fn where a is Run ("" for acts on no function);
// the error says what p lacks and is ErrForbidden in its chain.
func (p Principal) May(a Act, fn string) error {
	need := a.Needs()
	if p.Role < need {
		return fmt.Errorf("%w: %s is %s, and to %s takes the role %s or above", ErrForbidden, p.Name, p.Role, a, need)
	}
	if a == Run && fn != "" && !p.RunsFunction(fn) {
		return fmt.Errorf("%w: %s may run only the functions matching %q, not %s", ErrForbidden, p.Name, p.Functions, fn)
	}
	return nil
}

// RunsFunction says whether fn is among the functions p's Functions glob names.
func (p Principal) RunsFunction(fn string) bool {
	if p.Functions == "" || p.Functions == "*" {
		return true
	}
	ok, _ := path.Match(p.Functions, fn)
	return ok
}

// InAnyGroup says whether p is in one of groups; an empty groups is everyone.
func (p Principal) InAnyGroup(groups []string) bool {
	if len(groups) == 0 {
		return true
	}
	for _, g := range groups {
		if slices.Contains(p.Groups, g) {
			return true
		}
	}
	return false
}
