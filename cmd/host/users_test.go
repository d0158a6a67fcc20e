package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/agenthost/host/internal/audit"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/people"
	"github.com/agenthost/host/internal/testkit/natstest"
)

var hexToken = regexp.MustCompile(`^[0-9a-f]{64}\n$`)

// `host users` against a NATS without authorization, as the operator's CLI: each act and each
// refusal (an unknown role, a duplicate, a bad name, the last admin, a short token) says why,
// writes nothing, and is in the audit stream.
func TestUsersCLI(t *testing.T) {
	url, nc, _ := cliNATS(t)
	ctx := context.Background()
	// The server's URL comes from $NATS_URL: on `users add`, --nats is the login switch.
	users := func(args ...string) (string, string, int) {
		return runIn(t, []string{"NATS_URL=" + url}, append([]string{"users"}, args...)...)
	}

	out, errOut, code := users("add", "root", "--role", "admin")
	if code != 0 || !hexToken.MatchString(out) || !strings.Contains(errOut, "shown only now") {
		t.Fatalf("users add root: exit %d\nstdout %q\nstderr %s", code, out, errOut)
	}
	rootToken := strings.TrimSpace(out)
	out, errOut, code = users("add", "ada", "--role", "approver", "--group", "ops", "--group", "dba")
	if code != 0 || !hexToken.MatchString(out) {
		t.Fatalf("users add ada: exit %d\n%s%s", code, out, errOut)
	}
	short := filepath.Join(t.TempDir(), "short")
	os.WriteFile(short, []byte("too-short\n"), 0o600)
	chosen := filepath.Join(t.TempDir(), "chosen")
	os.WriteFile(chosen, []byte("a-token-ada-chose-herself\n"), 0o600)

	for _, c := range []struct {
		args []string
		code int
		has  string
	}{
		{[]string{"add", "bob", "--role", "boss"}, 1, `unknown role "boss": it is one of viewer, runner, approver, developer, admin`},
		{[]string{"add", "ada", "--role", "runner"}, 1, "add user ada: a user of that name exists"},
		{[]string{"add", "bad.name", "--role", "runner"}, 1, `user name "bad.name": use letters, digits, _ and -`},
		{[]string{"add", "hosts", "--role", "runner", "--nats"}, 1, "the hosts' own NATS user is called hosts; choose another name"},
		{[]string{"add", "bob", "--role", "runner", "--functions", "[x"}, 1, `--functions "[x" is not a glob`},
		{[]string{"rm", "root"}, 1, "remove user root: it would leave no admin: add another admin first"},
		{[]string{"rm", "nobody"}, 1, "remove user nobody: no such user"},
		{[]string{"token", "ada", "--token-file", short}, 1, "the token has 9 characters, want at least 16"},
		{[]string{"token", "ada", "--token-file", chosen}, 0, "user ada now logs in with the token in " + chosen},
		{[]string{"ls"}, 0, "ada   approver  dba,ops"},
	} {
		out, errOut, code := users(c.args...)
		if code != c.code || !strings.Contains(out+errOut, c.has) {
			t.Errorf("users %s: exit %d, want %d and %q in:\n%s%s", strings.Join(c.args, " "), code, c.code, c.has, out, errOut)
		}
	}
	// A refused add wrote nothing, a chosen token logs in, and the hashes stay in the store.
	js, _ := jetstream.New(nc)
	store, err := people.Open(ctx, js, 0)
	if err != nil {
		t.Fatal(err)
	}
	us, _ := store.Load(ctx)
	if len(us.ByName) != 2 {
		t.Errorf("after the refusals the store holds %v, want root and ada", us.Sorted())
	}
	if u, err := store.Authenticate(ctx, "a-token-ada-chose-herself"); err != nil || u.Name != "ada" {
		t.Errorf("ada's chosen token: %v %v", u.Name, err)
	}
	if u, err := store.Authenticate(ctx, rootToken); err != nil || u.Name != "root" {
		t.Errorf("root's printed token: %v %v", u.Name, err)
	}
	out, _, _ = users("ls", "--json")
	if !strings.Contains(out, `"role": "approver"`) || strings.Contains(out, us.ByName["ada"].TokenHash) || strings.Contains(out, "sha256") {
		t.Errorf("users ls --json shows a hash, or not the role:\n%s", out)
	}
	if _, _, code := users("rm", "ada"); code != 0 {
		t.Errorf("users rm ada: exit %d", code)
	}

	entries, err := audit.Read(ctx, js, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var acts []string
	for _, e := range entries {
		if e.Face != "cli" || e.Who != client.CanceledBy() {
			t.Errorf("audit entry %+v: want face cli and who %s, as every act of the operator's CLI", e, client.CanceledBy())
		}
		refused := ""
		if e.Error != "" {
			refused = " refused"
		}
		acts = append(acts, e.Act+" "+e.Target+refused)
	}
	want := []string{"user.add root", "user.add ada", "user.add bob refused", "user.add ada refused", "user.add bad.name refused",
		"user.add hosts refused", "user.add bob refused", "user.rm root refused", "user.rm nobody refused",
		"user.token ada refused", "user.token ada", "user.rm ada"}
	if strings.Join(acts, "\n") != strings.Join(want, "\n") {
		t.Errorf("audit entries:\n%s\nwant:\n%s", strings.Join(acts, "\n"), strings.Join(want, "\n"))
	}

	// A NATS login on a NATS without authorization cannot be enforced, and says so.
	out, errOut, code = users("add", "carol", "--role", "runner", "--nats")
	if code != 0 || !hexToken.MatchString(out) || !strings.Contains(errOut, "stored but not enforced") || !strings.Contains(errOut, "authorization {") {
		t.Errorf("users add carol --nats on a NATS without authorization: exit %d\nstdout %q\nstderr %s", code, out, errOut)
	}
}

// A user's NATS login on an embedded server with --nats-auth: `users add --nats` finds it in
// effect; with that login, `host users` is refused by the server and says it takes the hosts
// credentials, `host invoke` of a function outside its role names the subject refused, and of
// one inside it queues the job.
func TestUsersCLINATSLogin(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	auth, err := bus.LoadOrCreateAuth(filepath.Join(dir, "nats-auth.json"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := bus.StartEmbedded(bus.ServerConfig{Listen: "127.0.0.1:-1", StoreDir: filepath.Join(dir, "nats"), SyncInterval: time.Minute, Auth: auth}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	hosts, err := bus.Connect(ctx, bus.ConnectOptions{URL: srv.ClientURL(), User: auth.Hosts.User, Password: auth.Hosts.Password}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer hosts.Close()
	js, _ := jetstream.New(hosts)
	if _, err := bus.EnsureRunStream(ctx, js, []string{"agent.run.>"}, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	store, err := people.Open(ctx, js, 0)
	if err != nil {
		t.Fatal(err)
	}
	l := &bus.Logins{Server: srv, Users: store, Functions: func(context.Context) []string { return []string{"greet", "other"} }, Log: zaptest.NewLogger(t)}
	if err := l.Follow(ctx); err != nil {
		t.Fatal(err)
	}
	env := []string{"NATS_URL=" + srv.ClientURL()}
	asHosts := []string{"--user", auth.Hosts.User, "--password", auth.Hosts.Password}
	_, errOut, code := run(t, append([]string{"--nats", srv.ClientURL()}, append(asHosts, "users", "add", "dave", "--role", "runner", "--nats")...)...)
	if code != 1 || !strings.Contains(errOut, "--nats gives the user a NATS login and takes no value; name the server "+srv.ClientURL()+" with $NATS_URL") {
		t.Errorf("users add with the URL after --nats: exit %d\n%s", code, errOut)
	}
	out, errOut, code := runIn(t, env, append(asHosts, "users", "add", "dave", "--role", "runner", "--functions", "greet*", "--nats")...)
	if code != 0 || !strings.Contains(errOut, "the NATS login of dave is in effect on") {
		t.Fatalf("users add dave --nats: exit %d\nstdout %q\nstderr %s", code, out, errOut)
	}
	token := strings.TrimSpace(out)
	asDave := []string{"--nats", srv.ClientURL(), "--user", "dave", "--password", token}
	asHosts = append([]string{"--nats", srv.ClientURL()}, asHosts...)

	_, errOut, code = run(t, append(asDave, "users", "ls")...)
	if code != 1 || !strings.Contains(errOut, "your NATS login dave may not manage users: it takes the hosts credentials (an admin on the host)") {
		t.Errorf("users ls as dave: exit %d\n%s", code, errOut)
	}
	_, errOut, code = run(t, append(asDave, "invoke", "other")...)
	if code != 2 || !strings.Contains(errOut, "refused publish to agent.run.other to your NATS login dave: the login's role does not allow it") {
		t.Errorf("invoke other as dave: exit %d\n%s", code, errOut)
	}
	sub, _ := hosts.SubscribeSync("agent.run.greet")
	hosts.Flush()
	out, errOut, code = run(t, append(asDave, "invoke", "greet", `{"name":"Ada"}`, "--id", "dave-greet-1")...)
	if code != 0 || strings.TrimSpace(out) != "dave-greet-1" {
		t.Fatalf("invoke greet as dave: exit %d\n%s%s", code, out, errOut)
	}
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil || m.Header.Get(nats.MsgIdHdr) != "dave-greet-1" || string(m.Data) != `{"name":"Ada"}` {
		t.Fatalf("dave's trigger: %v %v", m, err)
	}
	_, errOut, code = run(t, append(asDave, "jobs")...)
	if code != 1 || !strings.Contains(errOut, "a user's NATS login has no JetStream API") {
		t.Errorf("jobs as dave: exit %d\n%s", code, errOut)
	}
	natstest.Eventually(t, "dave's login refused after users rm", func() bool {
		run(t, append(asHosts, "users", "rm", "dave")...)
		_, errOut, code := run(t, append(asDave, "invoke", "greet")...)
		return code == 2 && strings.Contains(errOut, "the NATS server refused the login dave: a wrong token, a user removed")
	})
}

// On a NATS that requires authorization but whose users no host installs (one its operator
// runs), `users add --nats` finds the login not taken and prints the block to install.
func TestUsersCLINATSLoginOnAnOperatorsNATS(t *testing.T) {
	dir := t.TempDir()
	auth, err := bus.LoadOrCreateAuth(filepath.Join(dir, "nats-auth.json"))
	if err != nil {
		t.Fatal(err)
	}
	srv := natstest.Server(t, bus.ServerConfig{StoreDir: filepath.Join(dir, "nats"), SyncInterval: time.Minute, Auth: auth}, zap.NewNop())
	out, errOut, code := runIn(t, []string{"NATS_URL=" + srv.ClientURL()}, "--user", auth.Hosts.User, "--password", auth.Hosts.Password,
		"users", "add", "erin", "--role", "viewer", "--nats")
	if code != 0 || !hexToken.MatchString(out) || !strings.Contains(errOut, "did not take the login of erin within 5s") ||
		!strings.Contains(errOut, `{ user: "erin", password: "$2a$`) || !strings.Contains(errOut, `publish: { deny: [">"] }`) {
		t.Errorf("users add erin --nats on an operator's NATS: exit %d\nstdout %q\nstderr %s", code, out, errOut)
	}
}
