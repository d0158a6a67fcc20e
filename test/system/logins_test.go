package system_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap/zaptest"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/people"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// TestRunnerLoginRunsItsFunctionsThroughARealHost: a real host on an embedded server with
// --nats-auth's users, the users' NATS logins followed as `serve --nats-auth` follows them
// (the --functions glob expanded against what the host serves). A runner allowed gre* calls
// greet through agent.call with its own login and inbox prefix and gets the result; its
// queued greet runs; agent.call.other is refused by the server; and a function that the glob
// names, added to the directory later, becomes callable without touching the user.
func TestRunnerLoginRunsItsFunctionsThroughARealHost(t *testing.T) {
	hosttest.RequireBwrap(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, fnDir := authDir(t, "host-logins-", map[string]string{
		"greet.sh": "# sandbox\necho '{\"hi\":\"rita\"}'\n",
		"other.sh": "# sandbox\necho '\"other\"'\n",
	})
	log := zaptest.NewLogger(t)
	auth, err := bus.LoadOrCreateAuth(filepath.Join(dir, "nats-auth.json"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := bus.StartEmbedded(bus.ServerConfig{Listen: "127.0.0.1:-1", StoreDir: filepath.Join(dir, "nats"), SyncInterval: time.Minute, Auth: auth}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	h, hostConn, _ := authHost(t, ctx, srv.ClientURL(), auth.Hosts, dir, fnDir, log)
	js, _ := jetstream.New(hostConn)
	store, err := people.Open(ctx, js, 0)
	if err != nil {
		t.Fatal(err)
	}
	logins := &bus.Logins{Server: srv, Users: store, Functions: h.ServedNames, Every: 300 * time.Millisecond, Log: log}
	if err := logins.Follow(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Add(ctx, people.User{Name: "rita", Role: people.Runner, Functions: "gre*", NATS: true}); err != nil {
		t.Fatal(err)
	}
	token, err := store.SetToken(ctx, "rita", "")
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var denied []string
	var rita *nats.Conn
	natstest.Eventually(t, "rita's login installed", func() bool {
		rita, err = nats.Connect(srv.ClientURL(), nats.UserInfo("rita", token), nats.CustomInboxPrefix(bus.CallerInboxPrefix("rita")),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				mu.Lock()
				denied = append(denied, err.Error())
				mu.Unlock()
			}))
		return err == nil
	})
	t.Cleanup(rita.Close)

	callCtx, callCancel := context.WithTimeout(ctx, time.Minute)
	defer callCancel()
	out, err := client.CallAsCaller(callCtx, rita, "greet", "rita-call-1", []byte(`{}`))
	if err != nil || out.Status != jobtype.Succeeded || string(out.Result) != `{"hi":"rita"}` {
		t.Fatalf("rita's agent.call of greet: %+v %v", out, err)
	}
	if err := client.QueueAsCaller(callCtx, rita, "greet", "rita-queued-1", []byte(`{}`)); err != nil {
		t.Fatalf("rita's queued greet: %v", err)
	}
	ops, err := client.New(ctx, hostConn)
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, ops, "rita-queued-1", jobtype.Succeeded)

	shortCtx, shortCancel := context.WithTimeout(ctx, 2*time.Second)
	defer shortCancel()
	if _, err := client.CallAsCaller(shortCtx, rita, "other", "rita-other-1", []byte(`{}`)); err == nil {
		t.Fatal("rita's agent.call of other was answered")
	}
	natstest.Eventually(t, "agent.call.other refused to rita", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, d := range denied {
			if strings.Contains(d, `Permissions Violation for Publish to "agent.call.other"`) {
				return true
			}
		}
		return false
	})
	if _, err := ops.Jobs.Get(ctx, "rita-other-1"); err == nil {
		t.Error("the refused call has a job record")
	}

	os.WriteFile(filepath.Join(fnDir, "greeting.sh"), []byte("# sandbox\necho '\"greeting\"'\n"), 0o644)
	natstest.Eventually(t, "greeting callable by rita once the host serves it", func() bool {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		out, err := client.CallAsCaller(ctx, rita, "greeting", "", []byte(`{}`))
		return err == nil && out.Status == jobtype.Succeeded
	})
}
