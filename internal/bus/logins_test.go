package bus_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/people"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// loginsServer is an embedded server with --nats-auth's generated users whose user logins
// follow a real users' store, as `host serve --nats-auth` runs it.
type loginsServer struct {
	srv   *bus.Embedded
	hosts *nats.Conn
	store *people.Store
	// functions are the functions "the hosts serve"; a test may change them at any time.
	functions atomic.Pointer[[]string]
}

func startLogins(t *testing.T, functions []string) *loginsServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	dir := t.TempDir()
	auth, err := bus.LoadOrCreateAuth(filepath.Join(dir, "nats-auth.json"))
	if err != nil {
		t.Fatal(err)
	}
	log := zaptest.NewLogger(t)
	srv, err := bus.StartEmbedded(bus.ServerConfig{Listen: "127.0.0.1:-1", StoreDir: filepath.Join(dir, "nats"), SyncInterval: time.Minute, Auth: auth}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	hosts, err := bus.Connect(ctx, bus.ConnectOptions{URL: srv.ClientURL(), User: auth.Hosts.User, Password: auth.Hosts.Password}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hosts.Close)
	js, _ := jetstream.New(hosts)
	store, err := people.Open(ctx, js, 0)
	if err != nil {
		t.Fatal(err)
	}
	s := &loginsServer{srv: srv, hosts: hosts, store: store}
	s.functions.Store(&functions)
	l := &bus.Logins{Server: srv, Users: store, Functions: func(context.Context) []string { return *s.functions.Load() }, Every: 200 * time.Millisecond, Log: log}
	if err := l.Follow(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// add stores a user with a NATS login and issues its token.
func (s *loginsServer) add(t *testing.T, u people.User) string {
	t.Helper()
	ctx := context.Background()
	u.NATS = true
	if _, err := s.store.Add(ctx, u); err != nil {
		t.Fatal(err)
	}
	token, err := s.store.SetToken(ctx, u.Name, "")
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, "the login of "+u.Name+" installed", func() bool {
		nc, err := nats.Connect(s.srv.ClientURL(), nats.UserInfo(u.Name, token), nats.NoReconnect())
		if err == nil {
			nc.Close()
		}
		return err == nil
	})
	return token
}

// cli runs the stock nats CLI as user with password against s, with the user's inbox prefix.
func (s *loginsServer) cli(t *testing.T, user, password string, args ...string) (string, error) {
	t.Helper()
	return natstest.RunNATSCLI(t, s.srv.ClientURL(), user, password, bus.CallerInboxPrefix(user), args...)
}

// refused runs the CLI and wants it to fail with a permissions violation naming subject.
func (s *loginsServer) refused(t *testing.T, user, password, subject string, args ...string) {
	t.Helper()
	out, _ := s.cli(t, user, password, args...)
	if want := `Permissions Violation for Publish to "` + subject + `"`; !strings.Contains(out, want) {
		t.Errorf("nats %s as %s: want %q in its output, got:\n%s", strings.Join(args, " "), user, want, out)
	}
}

// hear subscribes the hosts' connection to subject.
func (s *loginsServer) hear(t *testing.T, subject string) *nats.Subscription {
	t.Helper()
	sub, err := s.hosts.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	s.hosts.Flush()
	return sub
}

// TestUserLoginRunnerHeldToItsFunctions: a runner whose --functions is greet* publishes
// agent.run.greet with the stock nats CLI, and the server refuses it agent.run.other,
// agent.call.other, the admin subjects and the JetStream API. A function served later that the
// glob names becomes runnable without touching the user.
func TestUserLoginRunnerHeldToItsFunctions(t *testing.T) {
	s := startLogins(t, []string{"greet", "greeting", "other"})
	tok := s.add(t, people.User{Name: "alice", Role: people.Runner, Functions: "greet*"})
	runs := s.hear(t, "agent.run.>")

	out, err := s.cli(t, "alice", tok, "pub", "agent.run.greet", `{"name":"Ada"}`)
	if err != nil || !strings.Contains(out, `Published`) {
		t.Fatalf("nats pub agent.run.greet as the runner: %v\n%s", err, out)
	}
	if m, err := runs.NextMsg(5 * time.Second); err != nil || m.Subject != "agent.run.greet" {
		t.Fatalf("the runner's agent.run.greet did not arrive: %v", err)
	}
	s.refused(t, "alice", tok, "agent.run.other", "pub", "agent.run.other", "{}")
	s.refused(t, "alice", tok, "agent.call.other", "req", "agent.call.other", "{}")
	s.refused(t, "alice", tok, "agent.admin.secrets.set", "pub", "agent.admin.secrets.set", "{}")
	s.refused(t, "alice", tok, bus.UserDecideSubject("alice"), "pub", bus.UserDecideSubject("alice"), "{}")
	s.refused(t, "alice", tok, "$JS.API.STREAM.LIST", "stream", "ls")
	if m, err := runs.NextMsg(300 * time.Millisecond); err == nil {
		t.Fatalf("a refused publish arrived: %s", m.Subject)
	}

	s.functions.Store(&[]string{"greet", "greeting", "other", "greet2"})
	natstest.Eventually(t, "agent.run.greet2 allowed once greet2 is served", func() bool {
		_, err := s.cli(t, "alice", tok, "pub", "agent.run.greet2", "{}")
		return err == nil
	})
}

// TestUserLoginSubscribesToItsOwn: a login receives under its own inbox prefix and the
// results of its functions; the server refuses it another's inbox and other functions' results.
func TestUserLoginSubscribesToItsOwn(t *testing.T) {
	s := startLogins(t, []string{"greet", "other"})
	tok := s.add(t, people.User{Name: "alice", Role: people.Runner, Functions: "greet"})
	var denied sync.Map
	nc, err := nats.Connect(s.srv.ClientURL(), nats.UserInfo("alice", tok), nats.CustomInboxPrefix(bus.CallerInboxPrefix("alice")),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { denied.Store(err.Error(), true) }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	mine, _ := nc.SubscribeSync("agent.result.greet")
	for _, subj := range []string{"agent.result.other", "_INBOX_hosts.>", "_INBOX_bob.>", "agent.logs.>"} {
		nc.SubscribeSync(subj)
	}
	nc.Flush()
	s.hosts.Publish("agent.result.greet", []byte(`"hi"`))
	if _, err := mine.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("the runner's own function's result did not reach it: %v", err)
	}
	for _, subj := range []string{"agent.result.other", "_INBOX_hosts.>", "_INBOX_bob.>", "agent.logs.>"} {
		natstest.Eventually(t, "the subscription to "+subj+" refused", func() bool {
			found := false
			denied.Range(func(k, _ any) bool {
				found = found || strings.Contains(k.(string), `Subscription to "`+subj+`"`)
				return !found
			})
			return found
		})
	}
}

// TestUserLoginViewerPublishesNothing: a viewer may read every result and publish nowhere;
// an approver publishes its own decisions and no one else's.
func TestUserLoginViewerPublishesNothing(t *testing.T) {
	s := startLogins(t, []string{"greet"})
	vic := s.add(t, people.User{Name: "vic", Role: people.Viewer})
	ann := s.add(t, people.User{Name: "ann", Role: people.Approver})
	for _, subj := range []string{"agent.run.greet", "agent.call.greet", bus.UserDecideSubject("vic"), "agent.result.greet"} {
		s.refused(t, "vic", vic, subj, "pub", subj, "{}")
	}
	decisions := s.hear(t, bus.ApprovalsDecideSubject+".>")
	if out, err := s.cli(t, "ann", ann, "pub", bus.UserDecideSubject("ann"), `{"job_id":"x"}`); err != nil {
		t.Fatalf("the approver's own decide subject: %v\n%s", err, out)
	}
	if m, err := decisions.NextMsg(5 * time.Second); err != nil || m.Subject != bus.UserDecideSubject("ann") {
		t.Fatalf("the approver's decision did not arrive: %v", err)
	}
	s.refused(t, "ann", ann, bus.UserDecideSubject("vic"), "pub", bus.UserDecideSubject("vic"), "{}")
	s.refused(t, "ann", ann, bus.ApprovalsDecideSubject, "pub", bus.ApprovalsDecideSubject, "{}")
	// The diff of a staged step is the hosts' to read, as job records and volumes are.
	s.refused(t, "ann", ann, bus.ApprovalsShowSubject, "pub", bus.ApprovalsShowSubject, `{"job":"x"}`)
	if out, err := s.cli(t, "ann", ann, "pub", "agent.run.greet", "{}"); err != nil {
		t.Fatalf("an approver runs functions too: %v\n%s", err, out)
	}
}

// TestUserLoginRemovedOrRotated: a removed user's login is refused within moments and its open
// connection is closed; a rotated token's old password is refused and the new one works.
func TestUserLoginRemovedOrRotated(t *testing.T) {
	ctx := context.Background()
	s := startLogins(t, []string{"greet"})
	old := s.add(t, people.User{Name: "bob", Role: people.Runner})
	tok := s.add(t, people.User{Name: "alice", Role: people.Runner})

	closed := make(chan struct{})
	nc, err := nats.Connect(s.srv.ClientURL(), nats.UserInfo("alice", tok), nats.CustomInboxPrefix(bus.CallerInboxPrefix("alice")),
		nats.ReconnectWait(50*time.Millisecond), nats.MaxReconnects(3), nats.ClosedHandler(func(*nats.Conn) { close(closed) }),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})) // the authorization violations are expected
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	start := time.Now()
	if _, err := s.store.Remove(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, "the removed user's login refused", func() bool {
		out, err := s.cli(t, "alice", tok, "pub", "agent.run.greet", "{}")
		return err != nil && strings.Contains(out, "Authorization Violation")
	})
	t.Logf("users rm to the login refused: %s", time.Since(start).Round(time.Millisecond))
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatalf("the removed user's open connection is still %v", nc.Status())
	}

	start = time.Now()
	if _, err := s.store.SetToken(ctx, "bob", ""); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, "the rotated token's old password refused", func() bool {
		out, err := s.cli(t, "bob", old, "pub", "agent.run.greet", "{}")
		return err != nil && strings.Contains(out, "Authorization Violation")
	})
	t.Logf("users token to the old password refused: %s", time.Since(start).Round(time.Millisecond))
	fresh, err := s.store.SetToken(ctx, "bob", "a-chosen-token-of-bob")
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, "the new token works", func() bool {
		_, err := s.cli(t, "bob", fresh, "pub", "agent.run.greet", "{}")
		return err == nil
	})
}

// TestUsersConfigOnAnotherServer: the block printed for an operator's own NATS is a valid
// nats-server configuration, and a server started from it holds the login to its role.
func TestUsersConfigOnAnotherServer(t *testing.T) {
	s := startLogins(t, []string{"greet"})
	tok := s.add(t, people.User{Name: "alice", Role: people.Runner, Functions: "gr*"})
	us, err := s.store.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	users, _ := bus.NATSUsers(us, []string{"greet", "other"})
	block := bus.UsersConfig(users)
	if !strings.Contains(block, `"agent.run.greet"`) || strings.Contains(block, `"agent.run.other"`) || !strings.Contains(block, `"$2a$`) {
		t.Fatalf("the block:\n%s", block)
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, []byte("listen: 127.0.0.1:-1\n"+block), 0o600); err != nil {
		t.Fatal(err)
	}
	other := natstest.Server(t, bus.ServerConfig{ConfigFile: conf, StoreDir: filepath.Join(dir, "js")}, zap.NewNop())
	out, err := natstest.RunNATSCLI(t, other.ClientURL(), "alice", tok, bus.CallerInboxPrefix("alice"), "pub", "agent.run.greet", "{}")
	if err != nil {
		t.Fatalf("the login on a server configured with the block: %v\n%s", err, out)
	}
	out, _ = natstest.RunNATSCLI(t, other.ClientURL(), "alice", tok, bus.CallerInboxPrefix("alice"), "pub", "agent.run.other", "{}")
	if !strings.Contains(out, `Permissions Violation for Publish to "agent.run.other"`) {
		t.Fatalf("agent.run.other on a server configured with the block:\n%s", out)
	}
}
