package system_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/people"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// TestRedTeamOnlyHostsDecideApprovals is the attack of issue 37: a `callers` client reads a
// waiting step's job id from agent.result.<fn>, then sends the Approval-* headers itself, on
// agent.call and as a raw agent.run publish, naming a forged approver; and it starts the gate's
// next step directly with an "approval" of its own. None of it decides anything: the step
// still waits, no next step runs with the forged approver, the caller is not handed the
// record, and agent.admin.approvals.decide is refused to it by the server. The hosts' face
// (host approve) then decides, and the next step gets that approver.
func TestRedTeamOnlyHostsDecideApprovals(t *testing.T) {
	hosttest.RequireBwrap(t)
	ctx := context.Background()
	dir, fnDir := authDir(t, "host-decide-", map[string]string{
		"plan.sh":  "# sandbox\n# approve: timeout 1h\n# next: agent.run.apply\necho '{\"change\":\"drop table\"}'\n",
		"apply.sh": "# sandbox\necho '\"applied\"'\n",
	})
	observed, hostLogs := observer.New(zap.InfoLevel)
	log := zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), observed))
	auth, err := bus.LoadOrCreateAuth(filepath.Join(dir, "nats-auth.json"))
	if err != nil {
		t.Fatal(err)
	}
	srv := natstest.Server(t, bus.ServerConfig{Listen: "127.0.0.1:-1", StoreDir: filepath.Join(dir, "nats"), Auth: auth}, log)
	_, hostConn, _ := authHost(t, ctx, srv.ClientURL(), auth.Hosts, dir, fnDir, log)
	// The operator's CLI connects as hosts, as `host approve` does.
	ops, err := client.New(ctx, hostConn)
	if err != nil {
		t.Fatal(err)
	}

	v := &violations{}
	caller, err := nats.Connect(srv.ClientURL(), nats.UserInfo(auth.Callers.User, auth.Callers.Password), nats.ErrorHandler(v.handler),
		nats.CustomInboxPrefix(bus.CallersInboxPrefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(caller.Close)
	callerJS, _ := jetstream.New(caller)
	results, err := caller.SubscribeSync(bus.ResultSubject("plan"))
	if err != nil {
		t.Fatal(err)
	}
	caller.Flush()

	// Someone's flow reaches the gate; the attacker learns the job id from the broadcast result.
	victim := nats.NewMsg(bus.RunSubject("plan"))
	victim.Data = []byte(`{"db":"prod"}`)
	victim.Header.Set(bus.HeaderMsgID, "victim-plan")
	if _, err := ops.JS.PublishMsg(ctx, victim); err != nil {
		t.Fatal(err)
	}
	res, err := results.NextMsg(60 * time.Second)
	if err != nil {
		t.Fatalf("the gate's result never reached agent.result.plan: %v", err)
	}
	id := res.Header.Get(bus.HeaderJobID)
	waitStatus(t, ops, id, jobtype.Waiting)

	forged := func(m *nats.Msg) *nats.Msg {
		m.Header.Set(bus.HeaderApprovalOf, id)
		m.Header.Set(bus.HeaderApprovalDecision, "approve")
		m.Header.Set(bus.HeaderApprovalBy, "ciso@example.com")
		m.Header.Set(bus.HeaderApprovalComment, "lgtm")
		return m
	}
	t.Run("agent.call with Approval-* headers decides nothing", func(t *testing.T) {
		m := forged(nats.NewMsg(bus.CallSubject("plan")))
		m.Data = []byte(`{}`)
		reply, err := caller.RequestMsg(m, 60*time.Second)
		if err != nil {
			t.Fatalf("the call got no answer: %v", err)
		}
		if reply.Header.Get(bus.HeaderJobID) == id || strings.Contains(string(reply.Data), "ciso@example.com") || strings.Contains(string(reply.Data), `"approval"`) {
			t.Fatalf("the forged call was answered with the gate's record: %s %v", reply.Data, reply.Header)
		}
	})
	t.Run("a raw agent.run publish with Approval-* headers decides nothing", func(t *testing.T) {
		m := forged(nats.NewMsg(bus.RunSubject("plan")))
		m.Data = []byte(`{}`)
		m.Header.Set(bus.HeaderMsgID, "forged-run")
		m.Header.Set(bus.HeaderApprovalSig, "0123456789abcdefghijklmnopqrstuv") // a guessed proof
		if _, err := callerJS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
		// The forged message runs as the plain trigger it is: a gate job of its own, waiting.
		waitStatus(t, ops, "forged-run", jobtype.Waiting)
		if n := hostLogs.FilterMessageSnippet("dropped Approval-* headers that no host made").Len(); n < 2 {
			t.Fatalf("the host logged %d dropped forgeries, want one per attack", n)
		}
	})
	t.Run("the next step refuses an approval no decision made", func(t *testing.T) {
		m := nats.NewMsg(bus.RunSubject("apply"))
		m.Data = []byte(`{"change":"drop table","approval":{"by":"ciso@example.com"}}`)
		m.Header.Set(bus.HeaderMsgID, "forged-apply")
		if _, err := callerJS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
		rec := waitStatus(t, ops, "forged-apply", jobtype.Failed)
		if !strings.Contains(rec.Error, `"approval"`) || !strings.Contains(rec.Error, "approval gate of plan") {
			t.Fatalf("forged apply failed with %q, want the approval rule named", rec.Error)
		}
	})
	t.Run("callers may not ask a host to decide", func(t *testing.T) {
		body, _ := json.Marshal(jobs.DecideRequest{Job: id, Decision: "approve", By: "ciso@example.com"})
		if _, err := caller.Request(bus.ApprovalsDecideSubject, body, 2*time.Second); err == nil {
			t.Fatal("a caller's decision request was answered")
		}
		v.waitFor(t, bus.ApprovalsDecideSubject)
	})

	if rec, err := ops.Jobs.Get(ctx, id); err != nil || rec.Status != jobtype.Waiting || rec.Approval == nil || rec.Approval.By != "" {
		t.Fatalf("after the attacks the gate's record is %+v (%v); it must still wait, undecided", rec, err)
	}
	if applied, err := ops.Jobs.Recent(ctx, jobs.Filter{Function: "apply", Status: jobtype.Succeeded}, 0); err != nil || len(applied) != 0 {
		t.Fatalf("apply ran %d times before any decision (%v)", len(applied), err)
	}

	// The hosts' face decides; the next step gets that approver, and runs.
	done, err := ops.Decide(ctx, id, true, people.Operator("ada@ops", "test"), "checked")
	if err != nil || done.Status != jobtype.Succeeded || done.Approval.By != "ada@ops" {
		t.Fatalf("host approve: %+v, %v", done, err)
	}
	var applied []*jobs.Record
	natstest.Eventually(t, "apply ran after the decision", func() bool {
		applied, _ = ops.Jobs.Recent(ctx, jobs.Filter{Function: "apply", Status: jobtype.Succeeded}, 0)
		return len(applied) == 1
	})
	rec, err := ops.Jobs.Get(ctx, applied[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	var args struct{ Approval struct{ By, Comment string } }
	if err := json.Unmarshal(rec.Args, &args); err != nil || args.Approval.By != "ada@ops" || args.Approval.Comment != "checked" {
		t.Fatalf("apply's arguments %s (%v): want the approval of ada@ops", rec.Args, err)
	}
}

// waitStatus waits until job id's record has status, and returns it.
func waitStatus(t *testing.T, c *client.Client, id string, status jobtype.Status) *jobs.Record {
	t.Helper()
	var rec *jobs.Record
	natstest.Eventually(t, "job "+id+" is "+string(status), func() bool {
		r, err := c.Jobs.Get(context.Background(), id)
		rec = r
		return err == nil && r.Status == status
	})
	return rec
}
