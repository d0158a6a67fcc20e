package people_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/agenthost/host/internal/people"
	"github.com/agenthost/host/internal/testkit/natstest"
)

func TestStoreRefusesWhatItMustNotHold(t *testing.T) {
	_, js := natstest.Start(t)
	ctx := context.Background()
	s, err := people.Open(ctx, js, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Add(ctx, people.User{Name: "ada", Role: people.Admin}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Add(ctx, people.User{Name: "ada", Role: people.Viewer}); !errors.Is(err, people.ErrExists) {
		t.Fatalf("a duplicate user: %v, want ErrExists", err)
	}
	if _, err := s.Add(ctx, people.User{Name: "bob"}); err == nil || !strings.Contains(err.Error(), "unknown role") {
		t.Fatalf("no role: %v", err)
	}
	if _, err := s.Add(ctx, people.User{Name: "bob.smith", Role: people.Viewer}); err == nil {
		t.Fatal("a name with a dot (not one NATS subject token) was stored")
	}
	if _, err := s.Add(ctx, people.User{Name: "bob", Role: people.Viewer, Functions: "[x"}); err == nil {
		t.Fatal("a bad glob was stored")
	}
	if _, err := s.Remove(ctx, "ada"); !errors.Is(err, people.ErrLastAdmin) {
		t.Fatalf("removing the last admin: %v, want ErrLastAdmin", err)
	}
	if _, err := s.SetToken(ctx, "ada", "short"); err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Fatalf("a short token: %v", err)
	}
	if _, err := s.Remove(ctx, "nobody"); !errors.Is(err, people.ErrNotFound) {
		t.Fatalf("removing nobody: %v", err)
	}
	us, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(us.ByName) != 1 || us.ByName["ada"].TokenHash != "" {
		t.Fatalf("refused changes left something: %+v", us.ByName)
	}
	if _, err := people.ParseRole("owner"); err == nil || !strings.Contains(err.Error(), "viewer, runner, approver, developer, admin") {
		t.Fatalf("an unknown role: %v", err)
	}
}

func TestTokensAuthenticateAndRotate(t *testing.T) {
	_, js := natstest.Start(t)
	ctx := context.Background()
	s, _ := people.Open(ctx, js, 0)
	if _, err := s.Add(ctx, people.User{Name: "ada", Role: people.Approver, Groups: []string{"ops", "ops", "sec"}, NATS: true}); err != nil {
		t.Fatal(err)
	}
	tok, err := s.SetToken(ctx, "ada", "")
	if err != nil {
		t.Fatal(err)
	}
	u, err := s.Authenticate(ctx, tok)
	if err != nil || u.Name != "ada" || len(u.Groups) != 2 {
		t.Fatalf("authenticate: %+v %v", u, err)
	}
	if strings.Contains(u.TokenHash, tok) || u.TokenHash == "" {
		t.Fatal("the store holds the token, not its hash")
	}
	if bcrypt.CompareHashAndPassword([]byte(u.NATSHash), []byte(tok)) != nil {
		t.Fatal("the NATS login's bcrypt does not match the token")
	}
	tok2, err := s.SetToken(ctx, "ada", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx, tok); !errors.Is(err, people.ErrBadToken) {
		t.Fatalf("the rotated-out token still logs in: %v", err)
	}
	if _, err := s.Authenticate(ctx, tok2); err != nil {
		t.Fatal(err)
	}
}

func TestWatchSendsEachChange(t *testing.T) {
	_, js := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, _ := people.Open(ctx, js, 0)
	w, err := s.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := func() people.Users {
		select {
		case us := <-w:
			return us
		case <-time.After(10 * time.Second):
			t.Fatal("no update within 10s")
			return people.Users{}
		}
	}
	if us := next(); len(us.ByName) != 0 {
		t.Fatalf("first: %v", us.ByName)
	}
	s.Add(ctx, people.User{Name: "ada", Role: people.Admin})
	if us := next(); len(us.ByName) != 1 {
		t.Fatalf("after add: %v", us.ByName)
	}
}

func TestPrincipalMay(t *testing.T) {
	runner := people.Principal{Name: "rui", User: true, Role: people.Runner, Functions: "deploy-*"}
	if err := runner.May(people.Run, "deploy-api"); err != nil {
		t.Fatal(err)
	}
	if err := runner.May(people.Run, "billing"); !errors.Is(err, people.ErrForbidden) || !strings.Contains(err.Error(), "deploy-*") {
		t.Fatalf("outside its glob: %v", err)
	}
	if err := runner.May(people.Decide, ""); !errors.Is(err, people.ErrForbidden) || !strings.Contains(err.Error(), "approver") {
		t.Fatalf("a runner deciding: %v", err)
	}
	if err := people.Operator("admin (web token)", "web token").May(people.Administer, ""); err != nil {
		t.Fatal(err)
	}
	ap := people.Principal{Name: "ada", Role: people.Approver, Groups: []string{"sec"}}
	if !ap.InAnyGroup(nil) || !ap.InAnyGroup([]string{"ops", "sec"}) || ap.InAnyGroup([]string{"ops"}) {
		t.Fatal("groups")
	}
}
