package bus

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/agenthost/host/internal/people"
)

// What each role's login may publish and subscribe to, as the server is handed it.
func TestUserPermissions(t *testing.T) {
	fns := []string{"greet", "greeting", "other", "bad.name"}
	for _, c := range []struct {
		u        people.User
		pub, sub string
	}{
		{people.User{Name: "vic", Role: people.Viewer, Functions: "greet"}, "deny >",
			"_INBOX_vic.> agent.result.> agent.error.>"},
		{people.User{Name: "rob", Role: people.Runner}, "agent.run.> agent.call.>",
			"_INBOX_rob.> agent.result.> agent.error.>"},
		{people.User{Name: "rob", Role: people.Runner, Functions: "*"}, "agent.run.> agent.call.>",
			"_INBOX_rob.> agent.result.> agent.error.>"},
		{people.User{Name: "gil", Role: people.Runner, Functions: "greet*"},
			"agent.run.greet agent.call.greet agent.run.greeting agent.call.greeting",
			"_INBOX_gil.> agent.result.greet agent.error.greet agent.result.greeting agent.error.greeting"},
		{people.User{Name: "nob", Role: people.Runner, Functions: "zzz*"}, "deny >", "_INBOX_nob.>"},
		{people.User{Name: "ann", Role: people.Approver, Functions: "oth*"},
			"agent.run.other agent.call.other agent.admin.approvals.decide.ann",
			"_INBOX_ann.> agent.result.other agent.error.other"},
		{people.User{Name: "adm", Role: people.Admin}, "agent.run.> agent.call.> agent.admin.approvals.decide.adm",
			"_INBOX_adm.> agent.result.> agent.error.>"},
		// A device's topics: MQTT's sensors/# is sensors.> and sensors itself.
		{people.User{Name: "dev", Role: people.Viewer, Topics: []string{"sensors/#", "s3.events"}}, "sensors.> sensors s3.events",
			"_INBOX_dev.> agent.result.> agent.error.> sensors.> sensors s3.events"},
	} {
		p := UserPermissions(c.u, fns)
		pub := strings.Join(p.Publish.Allow, " ")
		if len(p.Publish.Deny) > 0 {
			pub = "deny " + strings.Join(p.Publish.Deny, " ")
		}
		if pub != c.pub || strings.Join(p.Subscribe.Allow, " ") != c.sub {
			t.Errorf("%s (%s, %q):\npublish   %s\nsubscribe %s\nwant\npublish   %s\nsubscribe %s",
				c.u.Name, c.u.Role, c.u.Functions, pub, strings.Join(p.Subscribe.Allow, " "), c.pub, c.sub)
		}
	}
}

// A reserved name and a user without a token yet get no server user.
func TestNATSUsersSkips(t *testing.T) {
	us := people.Users{ByName: map[string]people.User{
		"hosts": {Name: "hosts", Role: people.Admin, NATS: true, NATSHash: "$2a$10$x"},
		"new":   {Name: "new", Role: people.Runner, NATS: true},
		"web":   {Name: "web", Role: people.Runner, TokenHash: "abc"},
		"ok":    {Name: "ok", Role: people.Runner, NATS: true, NATSHash: "$2a$10$y"},
	}}
	users, skipped := NATSUsers(us, nil)
	if len(users) != 1 || users[0].Username != "ok" || users[0].Password != "$2a$10$y" || strings.Join(skipped, ",") != "hosts,new" {
		t.Fatalf("users %v, skipped %v", users, skipped)
	}
}

func TestAsDenied(t *testing.T) {
	err := fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `Permissions Violation for Publish to "$JS.API.INFO"`)
	d := AsDenied("ann", err)
	if d == nil || d.Op != "publish" || d.Subject != "$JS.API.INFO" || !d.JetStreamAPI() || !errors.Is(d, nats.ErrPermissionViolation) {
		t.Fatalf("%+v", d)
	}
	d = AsDenied("ann", fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `Permissions Violation for Subscription to "_INBOX_bob.>"`))
	if d.Op != "subscribe" || d.JetStreamAPI() || !strings.Contains(d.Error(), "refused subscribe to _INBOX_bob.> to your NATS login ann: the login's role does not allow it") {
		t.Fatalf("%+v: %v", d, d)
	}
	if AsDenied("ann", errors.New("timeout")) != nil {
		t.Fatal("a timeout is no denial")
	}
}
