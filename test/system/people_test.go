package system_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/people"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/web"
)

// TestApprovalsByNamedPeople: a real host (jails and all) records who started each flow as far
// as it can vouch for it, and holds each decision to the decider: the flow's starter is refused
// on its own step, a user outside the gate's groups is refused (an admin too), a viewer is
// refused on its own decide subject whatever its request claims, a user of the group approves
// and the record names that user; a step decided already says by whom. A plain NATS client's
// Started-By headers make nobody a starter.
func TestApprovalsByNamedPeople(t *testing.T) {
	h := hosttest.New(t, map[string]string{
		"plan.sh":  "# sandbox\n# approve: timeout 1h by ops\n# next: agent.run.apply\necho '{\"change\":\"drop table\"}'\n",
		"apply.sh": "# sandbox\necho '\"applied\"'\n",
	})
	ctx := context.Background()
	js, _ := jetstream.New(h.NC)
	st, err := people.Open(ctx, js, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []people.User{
		{Name: "ada", Role: people.Approver, Groups: []string{"ops"}},
		{Name: "bob", Role: people.Admin, Groups: []string{"dev"}},
		{Name: "vic", Role: people.Viewer, Groups: []string{"ops"}},
		{Name: "dan", Role: people.Approver, Groups: []string{"ops"}},
	} {
		if _, err := st.Add(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	ops, err := client.New(ctx, h.NC)
	if err != nil {
		t.Fatal(err)
	}
	waiting := func(id string) *jobs.Record {
		t.Helper()
		var rec *jobs.Record
		h.Eventually("job "+id+" waits", func() bool {
			rec, err = h.Store.Get(ctx, id)
			return err == nil && rec.Status == jobtype.Waiting
		})
		return rec
	}

	// The web face, with its token: the operator starts it, and the web face signs that.
	cfg := h.WebConfig()
	cfg.Auth.Token = "web-token-0123456789abcdef"
	srv := httptest.NewServer(web.New(cfg))
	t.Cleanup(srv.Close)
	code, body, _ := hosttest.Post(t, srv.URL+"/run/plan", `{}`, map[string]string{"Authorization": "Bearer " + cfg.Auth.Token})
	if code != 202 {
		t.Fatalf("POST /run/plan: %d %s", code, body)
	}
	webJob := hosttest.Decode[map[string]string](t, []byte(body))["job_id"]
	if rec := waiting(webJob); rec.StartedBy != "operator admin (bearer token)" || rec.Starter != "" {
		t.Fatalf("a run from the web face: started_by %q, starter %q", rec.StartedBy, rec.Starter)
	}

	// ada's flow, signed as the web face signs a user's run.
	m := nats.NewMsg(bus.RunSubject("plan"))
	m.Data = []byte(`{}`)
	m.Header.Set(bus.HeaderMsgID, "plan-ada")
	ids.Vouch(m, ids.NewKey(h.Key).Derive, "user ada", "ada")
	if err := h.NC.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	if rec := waiting("plan-ada"); rec.Starter != "ada" || rec.StartedBy != "user ada" {
		t.Fatalf("ada's flow: started_by %q, starter %q", rec.StartedBy, rec.Starter)
	}
	_, err = ops.Decide(ctx, "plan-ada", true, people.User{Name: "ada", Role: people.Approver, Groups: []string{"ops"}}.Principal("token"), "")
	if !errors.Is(err, client.ErrRefused) || !strings.Contains(err.Error(), "you started this flow; someone else must decide its steps") {
		t.Fatalf("ada on her own flow: %v", err)
	}
	_, err = ops.Decide(ctx, "plan-ada", true, people.User{Name: "bob", Role: people.Admin, Groups: []string{"dev"}}.Principal("token"), "")
	if !errors.Is(err, client.ErrRefused) || !strings.Contains(err.Error(), "not in the group(s) ops of this approval") {
		t.Fatalf("bob, of dev: %v", err)
	}
	rep := decideAs(t, h.NC, "vic", jobs.DecideRequest{Job: "plan-ada", Decision: "approve", Who: &people.Principal{Name: "bob", User: true, Role: people.Admin, Groups: []string{"ops"}}})
	if !rep.Refused || !strings.Contains(rep.Error, "vic is not an approver") {
		t.Fatalf("vic on agent.admin.approvals.decide.vic: %+v", rep)
	}
	if rec := waiting("plan-ada"); rec.Approval.Decision != "" {
		t.Fatalf("decided by a refused decider: %+v", rec.Approval)
	}
	rep = decideAs(t, h.NC, "dan", jobs.DecideRequest{Job: "plan-ada", Decision: "approve", Comment: "go", Wait: true})
	if rep.Error != "" || rep.Record == nil || rep.Record.Approval.By != "dan" || rep.Record.Status != jobtype.Succeeded {
		t.Fatalf("dan, of ops: %+v", rep)
	}
	_, err = ops.Decide(ctx, "plan-ada", false, people.Operator("root@vm", "cli"), "")
	if !errors.Is(err, client.ErrNotWaiting) || !strings.Contains(err.Error(), "was already approved by dan at") {
		t.Fatalf("a decision after dan's: %v", err)
	}

	// A plain client names dan the starter of its flow: recorded as its claim, and dan decides it.
	h.Publish(bus.RunSubject("plan"), `{}`, map[string]string{bus.HeaderMsgID: "plan-forged",
		bus.HeaderStartedBy: "user dan", bus.HeaderStarter: "dan", bus.HeaderStartedBySig: "AAAAAAAAAAAAAAAAAAAA"})
	if rec := waiting("plan-forged"); rec.Starter != "" || rec.StartedBy != "a NATS client (says user dan)" {
		t.Fatalf("a forged start: started_by %q, starter %q", rec.StartedBy, rec.Starter)
	}
	rep = decideAs(t, h.NC, "dan", jobs.DecideRequest{Job: "plan-forged", Decision: "reject", Wait: true})
	if rep.Error != "" || rep.Record.Approval.By != "dan" || rep.Record.Status != jobtype.Failed {
		t.Fatalf("dan on a flow a client said was his: %+v", rep)
	}
}

func decideAs(t *testing.T, nc *nats.Conn, user string, req jobs.DecideRequest) jobs.DecideReply {
	t.Helper()
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	m, err := nc.Request(bus.UserDecideSubject(user), body, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return hosttest.Decode[jobs.DecideReply](t, m.Data)
}
