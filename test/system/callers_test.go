package system_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/secrets"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// violations collects a connection's asynchronous errors: the server reports permission
// violations that way, both for publishing and for subscribing.
type violations struct {
	mu   sync.Mutex
	errs []string
}

func (v *violations) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	v.mu.Lock()
	v.errs = append(v.errs, err.Error())
	v.mu.Unlock()
}

// waitFor waits for a permission violation that names subject.
func (v *violations) waitFor(t *testing.T, subject string) {
	t.Helper()
	natstest.Eventually(t, "a permission violation for "+subject, func() bool {
		v.mu.Lock()
		defer v.mu.Unlock()
		for _, e := range v.errs {
			if strings.Contains(strings.ToLower(e), "permissions violation") && strings.Contains(e, subject) {
				return true
			}
		}
		return false
	})
}

// TestCallersReachFunctionsAndNothingElse starts a real NATS with authorization (from
// examples/nats-auth.conf, and from serve --nats-auth's generated users), a real host connected
// as hosts, and a client as callers. The caller invokes functions and reads results, and every
// way at the host's state (job records, secrets, volumes, the JetStream API) is refused.
func TestCallersReachFunctionsAndNothingElse(t *testing.T) {
	hosttest.RequireBwrap(t)
	t.Setenv("HOSTS_PASSWORD", "hosts-test-pw")
	t.Setenv("CALLERS_PASSWORD", "callers-test-pw")
	setups := []struct {
		name  string
		start func(t *testing.T, dir string) (*bus.ServerConfig, bus.Credential, bus.Credential)
	}{
		{"examples/nats-auth.conf", func(t *testing.T, dir string) (*bus.ServerConfig, bus.Credential, bus.Credential) {
			b, err := os.ReadFile("../../examples/nats-auth.conf")
			if err != nil {
				t.Fatal(err)
			}
			conf := strings.Replace(string(b), "listen: 0.0.0.0:4222", "listen: 127.0.0.1:-1", 1)
			conf = strings.Replace(conf, `store_dir: "./data/nats"`, `store_dir: "`+filepath.Join(dir, "nats")+`"`, 1)
			p := filepath.Join(dir, "nats-auth.conf")
			if err := os.WriteFile(p, []byte(conf), 0o600); err != nil {
				t.Fatal(err)
			}
			return &bus.ServerConfig{ConfigFile: p}, bus.Credential{User: "hosts", Password: "hosts-test-pw"}, bus.Credential{User: "callers", Password: "callers-test-pw"}
		}},
		{"serve --nats-auth", func(t *testing.T, dir string) (*bus.ServerConfig, bus.Credential, bus.Credential) {
			a, err := bus.LoadOrCreateAuth(filepath.Join(dir, "nats-auth.json"))
			if err != nil {
				t.Fatal(err)
			}
			return &bus.ServerConfig{Listen: "0.0.0.0:-1", StoreDir: filepath.Join(dir, "nats"), Auth: a}, a.Hosts, a.Callers
		}},
	}
	for _, setup := range setups {
		t.Run(setup.name, func(t *testing.T) {
			ctx := context.Background()
			dir, fnDir := authDir(t, "host-callers-", map[string]string{"hello.sh": "# sandbox\necho \"\\\"hi $ARG_NAME\\\"\"\n"})
			observed, hostLogs := observer.New(zap.InfoLevel)
			log := zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), observed))
			cfg, hostsCred, callersCred := setup.start(t, dir)
			srv := natstest.Server(t, *cfg, log)
			// The host connects over the socket as hosts, as a host on another machine would.
			_, hostConn, key := authHost(t, ctx, srv.ClientURL(), hostsCred, dir, fnDir, log)
			hostJS, _ := jetstream.New(hostConn)
			st, err := secrets.Bind(ctx, hostJS, key)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Set(ctx, "api-key", json.RawMessage(`"sk-very-secret"`)); err != nil {
				t.Fatal(err)
			}
			jobsKV, err := hostJS.KeyValue(ctx, "agent_jobs")
			if err != nil {
				t.Fatal(err)
			}

			// Anonymous clients are turned away.
			if nc, err := nats.Connect(srv.ClientURL()); err == nil {
				nc.Close()
				t.Fatal("an anonymous client connected")
			}
			v := &violations{}
			// Callers receive replies under their own inbox prefix (see TestCallersSeeNoneOfTheHostsTraffic).
			caller, err := nats.Connect(srv.ClientURL(), nats.UserInfo(callersCred.User, callersCred.Password), nats.ErrorHandler(v.handler),
				nats.CustomInboxPrefix(bus.CallersInboxPrefix))
			if err != nil {
				t.Fatalf("callers cannot connect: %v", err)
			}
			t.Cleanup(caller.Close)

			t.Run("the shared _INBOX. prefix is not the callers'", func(t *testing.T) {
				dv := &violations{}
				nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(callersCred.User, callersCred.Password), nats.ErrorHandler(dv.handler))
				if err != nil {
					t.Fatal(err)
				}
				defer nc.Close()
				if _, err := nc.Request("agent.call.hello", []byte(`{"name":"Ada"}`), time.Second); err == nil {
					t.Fatal("a caller received a reply under _INBOX., where every client's replies are")
				}
				dv.waitFor(t, "_INBOX.")
			})

			t.Run("agent.call gets its reply", func(t *testing.T) {
				reply, err := caller.Request("agent.call.hello", []byte(`{"name":"Ada"}`), 60*time.Second)
				if err != nil || string(reply.Data) != `"hi Ada"` {
					t.Fatalf("reply %v, err %v", reply, err)
				}
			})
			t.Run("agent.run is acknowledged by JetStream and its result read on agent.result", func(t *testing.T) {
				results, err := caller.SubscribeSync("agent.result.hello")
				if err != nil {
					t.Fatal(err)
				}
				defer results.Unsubscribe()
				caller.Flush()
				js, _ := jetstream.New(caller)
				m := nats.NewMsg("agent.run.hello")
				m.Data = []byte(`{"name":"Bo"}`)
				m.Header.Set(bus.HeaderMsgID, "caller-run-1")
				pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				if ack, err := js.PublishMsg(pctx, m); err != nil || ack.Stream != bus.RunStream {
					t.Fatalf("JetStream publish as callers: ack %+v, err %v", ack, err)
				}
				res, err := results.NextMsg(60 * time.Second)
				if err != nil || string(res.Data) != `"hi Bo"` {
					t.Fatalf("result %v, err %v", res, err)
				}
			})

			// Each way at the host's state must be refused by the server.
			requests := []struct{ name, subject string }{
				{"list streams", "$JS.API.STREAM.LIST"},
				{"stream names", "$JS.API.STREAM.NAMES"},
				{"job records stream info", "$JS.API.STREAM.INFO.KV_agent_jobs"},
				{"read a job record", "$JS.API.DIRECT.GET.KV_agent_jobs.$KV.agent_jobs.caller-run-1"},
				{"read a secret envelope", "$JS.API.STREAM.MSG.GET.KV_agent_secrets"},
				{"volumes bucket info", "$JS.API.STREAM.INFO.OBJ_agent_volumes"},
				{"make a consumer on the secrets", "$JS.API.CONSUMER.CREATE.KV_agent_secrets"},
				{"delete the trigger stream", "$JS.API.STREAM.DELETE.AGENT_RUN"},
			}
			for _, r := range requests {
				t.Run("cannot "+r.name, func(t *testing.T) {
					reply, err := caller.Request(r.subject, []byte(`{}`), time.Second)
					if err == nil {
						t.Fatalf("%s answered: %s", r.subject, reply.Data)
					}
					v.waitFor(t, r.subject)
				})
			}
			subs := []struct{ name, subject string }{
				{"watch job records", "$KV.agent_jobs.>"},
				{"watch secrets", "$KV.agent_secrets.>"},
				{"read volume chunks", "$O.agent_volumes.>"},
				{"read the logs stream's subjects", "agent.logs.>"},
				{"sniff every trigger", "agent.run.>"},
			}
			for _, s := range subs {
				t.Run("cannot "+s.name, func(t *testing.T) {
					sub, err := caller.SubscribeSync(s.subject)
					if err != nil {
						t.Fatal(err)
					}
					defer sub.Unsubscribe()
					caller.Flush()
					v.waitFor(t, s.subject)
				})
			}
			t.Run("cannot write a job record", func(t *testing.T) {
				caller.Publish("$KV.agent_jobs.forged", []byte(`{"status":"succeeded"}`))
				caller.Flush()
				v.waitFor(t, "$KV.agent_jobs.forged")
				if _, err := jobsKV.Get(ctx, "forged"); !errors.Is(err, jetstream.ErrKeyNotFound) {
					t.Fatalf("the caller wrote a job record: %v", err)
				}
			})
			t.Run("cannot open the buckets through the JetStream client", func(t *testing.T) {
				js, _ := jetstream.New(caller)
				cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				defer cancel()
				if _, err := js.KeyValue(cctx, "agent_secrets"); err == nil {
					t.Fatal("callers opened the secrets bucket")
				}
				if _, err := js.ObjectStore(cctx, "agent_volumes"); err == nil {
					t.Fatal("callers opened the volumes bucket")
				}
			})

			// Escalation through the host: a trigger whose headers or reply subject name a KV
			// subject must not make the host, which may write there, write there for the caller.
			// The host-side fix (replies only to the inbox of the core request) is another change.
			// Each case waits for the host's own word that it is done with the trigger before
			// looking for what it must not have written.
			escalations := []struct {
				name string
				key  string
				msg  func(key string) *nats.Msg
				done func(t *testing.T, results *nats.Subscription)
			}{
				{"a Reply-To header on agent.run", "escalated-header", func(key string) *nats.Msg {
					m := nats.NewMsg("agent.run.hello")
					m.Header.Set(bus.HeaderReplyTo, "$KV.agent_jobs."+key)
					return m
				}, func(t *testing.T, results *nats.Subscription) {
					// The job runs; its reply, if any, would go out before its final record.
					res, err := results.NextMsg(2 * time.Minute)
					if err != nil {
						t.Fatalf("the run did not finish: %v", err)
					}
					if string(res.Data) != `"hi Eve"` {
						t.Fatalf("result %s", res.Data)
					}
					waitFinal(t, jobsKV, res.Header.Get(bus.HeaderJobID))
				}},
				{"a reply subject on agent.call", "escalated-reply", func(key string) *nats.Msg {
					m := nats.NewMsg("agent.call.hello")
					m.Reply = "$KV.agent_jobs." + key
					return m
				}, func(t *testing.T, _ *nats.Subscription) {
					// Refused before anything is queued: answering would be the write refused.
					const refused = "call refused: its reply subject is not an inbox; a request's reply subject must be one (as `nats req` makes), never a subject that acts"
					natstest.Eventually(t, "the host refuses the call with a $KV reply subject", func() bool {
						return hostLogs.FilterMessage(refused).Len() > 0
					})
				}},
			}
			for _, e := range escalations {
				t.Run("no escalation through "+e.name, func(t *testing.T) {
					results, _ := caller.SubscribeSync("agent.result.hello")
					defer results.Unsubscribe()
					caller.Flush()
					m := e.msg(e.key)
					m.Data = []byte(`{"name":"Eve"}`)
					if err := caller.PublishMsg(m); err != nil {
						t.Fatal(err)
					}
					e.done(t, results)
					if entry, err := jobsKV.Get(ctx, e.key); !errors.Is(err, jetstream.ErrKeyNotFound) {
						if err == nil {
							t.Fatalf("the host wrote the caller's run into the job records at %s: %s", e.key, entry.Value())
						}
						t.Fatal(err)
					}
				})
			}
		})
	}
}

// waitFinal waits until the job's record says it has ended.
func waitFinal(t *testing.T, kv jetstream.KeyValue, id string) {
	t.Helper()
	natstest.Eventually(t, "job "+id+" has a final record", func() bool {
		e, err := kv.Get(context.Background(), id)
		if err != nil {
			return false
		}
		var r jobs.Record
		return json.Unmarshal(e.Value(), &r) == nil && r.Status.Final()
	})
}
