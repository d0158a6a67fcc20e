package system_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/objstore"
	"github.com/agenthost/host/internal/secrets"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// diary keeps what each user writes in a volume of that user's, reads a secret, logs a line
// and returns nothing of either: whatever of it a caller sees came off the host's own traffic.
const diary = `# sandbox
# volume: $args[user]-diary diary
# env: DIARY_KEY=$secret:diary-key
# timeout: 60s
[ -n "$DIARY_KEY" ] || exit 3
echo "volmark-$ARG_TEXT" >> diary/entries.txt
echo "logmark-$ARG_TEXT"
echo '{"ok":true}'
`

// withAlice is examples/nats-auth.conf with the user its comment describes for a second
// caller, alice, with her own inbox prefix, as an operator would add her.
func withAlice(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile("../../examples/nats-auth.conf")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var alice []string
	for i, l := range lines {
		if strings.Contains(l, "#   { user: alice") {
			alice = []string{strings.TrimPrefix(strings.TrimSpace(l), "#"), strings.TrimPrefix(strings.TrimSpace(lines[i+1]), "#")}
		}
	}
	if alice == nil {
		t.Fatal("examples/nats-auth.conf no longer shows how to add a caller user of one's own (alice)")
	}
	conf := strings.Replace(string(b), "listen: 0.0.0.0:4222", "listen: 127.0.0.1:-1", 1)
	conf = strings.Replace(conf, `store_dir: "./data/nats"`, `store_dir: "`+filepath.Join(dir, "nats")+`"`, 1)
	conf = strings.Replace(conf, "      {\n        user: callers", "      "+strings.Join(alice, " ")+"\n      {\n        user: callers", 1)
	p := filepath.Join(dir, "nats-auth.conf")
	if err := os.WriteFile(p, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// The red team, subscribed as callers to _INBOX.>, saw every trigger payload, job records,
// lease records, volume chunks of another user's diary, secret envelopes, log lines whenever
// someone ran `host logs`, and other callers' replies: NATS delivers all of them to inboxes.
// Here a callers client subscribes to everything it may, and to everything it may not, while
// other callers' jobs with volumes, secrets and logs run and the host's CLI reads their
// records, logs and volumes; it must receive none of it, and still get its own replies.
func TestCallersSeeNoneOfTheHostsTraffic(t *testing.T) {
	hosttest.RequireBwrap(t)
	t.Setenv("HOSTS_PASSWORD", "hosts-test-pw")
	t.Setenv("CALLERS_PASSWORD", "callers-test-pw")
	t.Setenv("ALICE_PASSWORD", "alice-test-pw")
	setups := []struct {
		name  string
		start func(t *testing.T, dir string) (cfg *bus.ServerConfig, hosts, callers bus.Credential, alice *bus.Credential)
	}{
		{"examples/nats-auth.conf with a caller user of alice's own", func(t *testing.T, dir string) (*bus.ServerConfig, bus.Credential, bus.Credential, *bus.Credential) {
			return &bus.ServerConfig{ConfigFile: withAlice(t, dir)}, bus.Credential{User: "hosts", Password: "hosts-test-pw"},
				bus.Credential{User: "callers", Password: "callers-test-pw"}, &bus.Credential{User: "alice", Password: "alice-test-pw"}
		}},
		{"serve --nats-auth", func(t *testing.T, dir string) (*bus.ServerConfig, bus.Credential, bus.Credential, *bus.Credential) {
			a, err := bus.LoadOrCreateAuth(filepath.Join(dir, "nats-auth.json"))
			if err != nil {
				t.Fatal(err)
			}
			return &bus.ServerConfig{StoreDir: filepath.Join(dir, "nats"), Auth: a}, a.Hosts, a.Callers, nil
		}},
	}
	for _, setup := range setups {
		t.Run(setup.name, func(t *testing.T) {
			ctx := context.Background()
			dir, fnDir := authDir(t, "host-inboxes-", map[string]string{"diary.sh": diary})
			log := zaptest.NewLogger(t)
			cfg, hostsCred, callersCred, aliceCred := setup.start(t, dir)
			srv := natstest.Server(t, *cfg, log)

			// The host, and the operator's CLI, connect as hosts, as serve and `host ...` do.
			connectHosts := func(name string) *nats.Conn {
				nc, err := bus.Connect(ctx, bus.ConnectOptions{URL: srv.ClientURL(), User: hostsCred.User, Password: hostsCred.Password, Name: name}, log)
				if err != nil {
					t.Fatalf("connect as hosts: %v", err)
				}
				t.Cleanup(nc.Close)
				return nc
			}
			_, _, key := authHost(t, ctx, srv.ClientURL(), hostsCred, dir, fnDir, log)
			cliConn := connectHosts("host-cli")
			cli, err := client.New(ctx, cliConn)
			if err != nil {
				t.Fatal(err)
			}

			// The spy: callers, with the inbox prefix its permissions allow, subscribed to
			// everything, allowed or not (the server refuses the rest, reported as async errors).
			spy, err := nats.Connect(srv.ClientURL(), nats.UserInfo(callersCred.User, callersCred.Password),
				nats.CustomInboxPrefix(bus.CallersInboxPrefix), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
			if err != nil {
				t.Fatalf("callers cannot connect: %v", err)
			}
			t.Cleanup(spy.Close)
			seen := make(chan *nats.Msg, 1<<16)
			sniffed := []string{">", "_INBOX.>", bus.HostsInboxPrefix + ".>", bus.CallersInboxPrefix + ".>", bus.CallerInboxPrefix("alice") + ".>",
				"agent.result.>", "agent.error.>", "agent.run.>", "agent.logs.>", "$KV.>", "$O.>", "$JS.>"}
			for _, s := range sniffed {
				if _, err := spy.ChanSubscribe(s, seen); err != nil {
					t.Fatal(err)
				}
			}
			spy.Flush() // the server has every subscription (or has refused it) before the traffic

			// The traffic: a secret set, other callers' jobs with it, their volumes and logs,
			// and the host's CLI reading records, logs and a volume, as `host job`, `host logs`
			// and `host volumes get` do.
			st, err := secrets.Bind(ctx, cli.JS, key)
			if err != nil {
				t.Fatal(err)
			}
			const secretValue = "diary-secret-value-9f3a61c2"
			if err := st.Set(ctx, "diary-key", json.RawMessage(`"`+secretValue+`"`)); err != nil {
				t.Fatal(err)
			}
			markers := []string{secretValue}
			runAs := func(user string) string {
				text := "argmark" + strings.ReplaceAll(ids.New(), "-", "")
				markers = append(markers, text)
				id := ids.New()
				if err := cli.Invoke(ctx, "diary", id, []byte(fmt.Sprintf(`{"user":%q,"text":%q}`, user, text))); err != nil {
					t.Fatal(err)
				}
				rec, err := cli.FollowJob(ctx, "diary", id, func(client.LogLine) {})
				if err != nil || rec.Status != "succeeded" {
					t.Fatalf("%s's job: %+v %v", user, rec, err)
				}
				return id
			}
			bobJob := runAs("bob")
			runAs("bob") // a second version: the first one's files come out of the store
			lines, err := cli.Logs(ctx, bobJob)
			if err != nil || !slices.ContainsFunc(lines, func(l client.LogLine) bool { return strings.Contains(l.Text, "logmark-argmark") }) {
				t.Fatalf("host logs %s: %v %v", bobJob, lines, err)
			}
			if _, err := cli.Jobs.Get(ctx, bobJob); err != nil {
				t.Fatal(err)
			}
			vols, err := objstore.New(ctx, cli.JS, mustJSBackend(t, cli.JS), objstore.Options{Log: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			var diaryFile bytes.Buffer
			if err := vols.Get(ctx, "bob-diary", 0, "entries.txt", &diaryFile); err != nil || !strings.Contains(diaryFile.String(), "volmark-argmark") {
				t.Fatalf("host volumes get bob-diary entries.txt: %q %v", diaryFile.String(), err)
			}
			if aliceCred != nil {
				alice, err := nats.Connect(srv.ClientURL(), nats.UserInfo(aliceCred.User, aliceCred.Password), nats.CustomInboxPrefix(bus.CallerInboxPrefix("alice")))
				if err != nil {
					t.Fatalf("alice cannot connect: %v", err)
				}
				defer alice.Close()
				text := "argmark" + strings.ReplaceAll(ids.New(), "-", "")
				markers = append(markers, text)
				reply, err := alice.Request("agent.call.diary", []byte(fmt.Sprintf(`{"user":"alice","text":%q}`, text)), time.Minute)
				if err != nil || string(reply.Data) != `{"ok":true}` {
					t.Fatalf("alice's call: %v %v", reply, err)
				}
				// A refusal is a reply no broadcast repeats: it names what alice sent.
				m := nats.NewMsg("agent.call.nosuch")
				m.Data = []byte(`{}`)
				m.Header.Set(bus.HeaderMsgID, "alices-own-"+text)
				if reply, err := alice.RequestMsg(m, time.Minute); err != nil || !strings.Contains(string(reply.Data), text) {
					t.Fatalf("alice's refused call: %v %v", reply, err)
				}
			}

			// The spy's own call still works, and, coming after everything above on its own
			// connection, it arrives after every copy of it the server could have sent the spy.
			reply, err := spy.Request("agent.call.diary", []byte(`{"user":"spy","text":"own"}`), time.Minute)
			if err != nil || string(reply.Data) != `{"ok":true}` {
				t.Fatalf("the callers' own agent.call: %v %v", reply, err)
			}
			ownInbox := reply.Subject[:strings.LastIndex(reply.Subject, ".")+1]
			results := 0
			for len(seen) > 0 {
				m := <-seen
				data := string(m.Data)
				for _, mark := range markers {
					if strings.Contains(data, mark) {
						t.Errorf("callers read %s on %s: %.300s", mark, m.Subject, data)
					}
				}
				switch {
				case strings.HasPrefix(m.Subject, "agent.result.") || strings.HasPrefix(m.Subject, "agent.error."):
					results++ // broadcasts, by design (their content checked above)
				case strings.HasPrefix(m.Subject, ownInbox):
				default:
					t.Errorf("callers received a message on %s (headers %v): %.200s", m.Subject, m.Header, data)
				}
			}
			if results == 0 {
				t.Fatal("the spy saw no result event at all: its subscriptions did not work, and the test proves nothing")
			}
		})
	}
}

func mustJSBackend(t *testing.T, js jetstream.JetStream) objstore.Backend {
	t.Helper()
	b, err := objstore.NewJetStreamBackend(context.Background(), js, objstore.DefaultJetStreamBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
