package bus

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/agenthost/host/internal/people"
)

// ReservedLogin says why name cannot be a user's NATS login: the generated users of
// `serve --nats-auth` have those names, and a second user of the same name would either fail
// the server's configuration or take the hosts' rights. "" when it can.
func ReservedLogin(name string) string {
	switch name {
	case HostsUser:
		return "the hosts' own NATS user is called " + HostsUser
	case CallersUser:
		return "the generated callers' NATS user is called " + CallersUser
	}
	return ""
}

// UserPermissions are what a user's NATS login may do, by its role, the NATS server enforcing
// them. Every login receives replies under its own inbox prefix (_INBOX_<name>) only.
//   - viewer: subscribe to every function's results and errors; publish nothing.
//   - runner and above: publish agent.run.<fn> and agent.call.<fn>, and subscribe to
//     agent.result.<fn> and agent.error.<fn>, for the functions its Functions glob names. A glob
//     is no NATS subject pattern, so it is expanded against functions (those the hosts serve);
//     no glob (or "*") is every function, as agent.run.> and agent.call.>.
//   - approver and above: also publish UserDecideSubject(name), its own decisions.
//   - any role: publish and subscribe to its Topics (people.TopicSubject).
//
// Nothing else: no $JS.API (so no KV, no job records, no secrets, no volumes), no agent.admin.>
// beyond its decide subject, no other inbox. A JetStream publish needs no $JS.API permission:
// the stream acknowledges to the login's inbox.
func UserPermissions(u people.User, functions []string) *server.Permissions {
	all := u.Functions == "" || u.Functions == "*"
	sub := []string{CallerInboxPrefix(u.Name) + ".>"}
	var pub []string
	if all || u.Role == people.Viewer {
		sub = append(sub, ResultPrefix+">", ErrorPrefix+">")
	}
	if all && u.Role >= people.Runner {
		pub = append(pub, RunPrefix+">", CallPrefix+">")
	}
	if !all {
		for _, fn := range GlobMatches(u.Functions, functions) {
			if u.Role >= people.Runner {
				pub = append(pub, RunSubject(fn), CallSubject(fn))
				sub = append(sub, ResultSubject(fn), ErrorSubject(fn))
			}
		}
	}
	if u.Role >= people.Approver {
		pub = append(pub, UserDecideSubject(u.Name))
	}
	// Its topics (an MQTT device's, an S3 server's), which Check made sure stay clear of the
	// hosts' subjects.
	for _, t := range u.Topics {
		s, err := people.TopicSubject(t)
		if err != nil {
			continue
		}
		pub, sub = append(pub, s), append(sub, s)
		// MQTT's sensors/# covers the level sensors itself too: the gateway subscribes to both
		// sensors.> and sensors, and refuses the whole filter when one is denied.
		if parent, ok := strings.CutSuffix(s, ".>"); ok {
			pub, sub = append(pub, parent), append(sub, parent)
		}
	}
	p := &server.Permissions{Subscribe: &server.SubjectPermission{Allow: sub}}
	if len(pub) == 0 {
		// An allow list with nothing in it would mean "no publish permissions set" to a reader
		// of the printed block; a deny of everything says what it is.
		p.Publish = &server.SubjectPermission{Deny: []string{">"}}
	} else {
		p.Publish = &server.SubjectPermission{Allow: pub}
	}
	return p
}

// GlobMatches lists the names among functions that glob (path.Match) names, sorted, without
// duplicates. Names that could not be a single subject token are left out.
func GlobMatches(glob string, functions []string) []string {
	var out []string
	for _, fn := range functions {
		if fn == "" || strings.ContainsAny(fn, ".*> \t") {
			continue
		}
		if ok, _ := path.Match(glob, fn); ok {
			out = append(out, fn)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// NATSUsers are the nats-server users of the stored users that have a NATS login: name, the
// stored bcrypt of its token (nats-server compares a configured password that is a bcrypt hash
// with bcrypt), and UserPermissions. A user without a hash yet (added, its token not yet
// issued) and a name ReservedLogin refuses are left out; skipped names them.
func NATSUsers(us people.Users, functions []string) (users []*server.User, skipped []string) {
	for _, u := range us.Sorted() {
		if !u.NATS {
			continue
		}
		if u.NATSHash == "" || ReservedLogin(u.Name) != "" {
			skipped = append(skipped, u.Name)
			continue
		}
		users = append(users, &server.User{Username: u.Name, Password: u.NATSHash, Permissions: UserPermissions(u, functions)})
	}
	return users, skipped
}

// UsersConfig renders users as the `users` entries of a nats-server configuration, for an
// operator who runs NATS: put them in the `authorization { users = [...] }` block (or in the
// account's users), then `nats-server --signal reload`. Passwords are bcrypt hashes, quoted so
// that the configuration's parser does not read their `$` as a variable.
func UsersConfig(users []*server.User) string {
	var b strings.Builder
	b.WriteString("authorization {\n  users = [\n")
	for _, u := range users {
		fmt.Fprintf(&b, "    { user: %s, password: %s", strconv.Quote(u.Username), strconv.Quote(u.Password))
		if p := u.Permissions; p != nil {
			b.WriteString(", permissions: {")
			writeSubjectPermission(&b, "publish", p.Publish)
			if p.Publish != nil && p.Subscribe != nil {
				b.WriteString(",")
			}
			writeSubjectPermission(&b, "subscribe", p.Subscribe)
			b.WriteString(" }")
		}
		b.WriteString(" }\n")
	}
	b.WriteString("  ]\n}\n")
	return b.String()
}

func writeSubjectPermission(b *strings.Builder, what string, p *server.SubjectPermission) {
	if p == nil {
		return
	}
	fmt.Fprintf(b, " %s: {", what)
	sep := ""
	for _, l := range []struct {
		key      string
		subjects []string
	}{{"allow", p.Allow}, {"deny", p.Deny}} {
		if len(l.subjects) == 0 {
			continue
		}
		q := make([]string, len(l.subjects))
		for i, s := range l.subjects {
			q[i] = strconv.Quote(s)
		}
		fmt.Fprintf(b, "%s %s: [%s]", sep, l.key, strings.Join(q, ", "))
		sep = ","
	}
	b.WriteString(" }")
}
