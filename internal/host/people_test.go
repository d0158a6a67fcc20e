package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/audit"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/people"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// addUsers stores users (name → role and groups) as `host users add` does.
func addUsers(t *testing.T, h *hosttest.H, users ...people.User) *people.Store {
	t.Helper()
	js, err := jetstream.New(h.NC)
	if err != nil {
		t.Fatal(err)
	}
	st, err := people.Open(context.Background(), js, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		if _, err := st.Add(context.Background(), u); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// publishSigned publishes a trigger whose Started-By headers a host's key signed, as the web
// face signs a user's POST /run.
func publishSigned(t *testing.T, h *hosttest.H, subject, id, payload, startedBy, starter string) {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Data = []byte(payload)
	m.Header.Set(bus.HeaderMsgID, id)
	if !ids.Vouch(m, ids.NewKey(h.Key).Derive, startedBy, starter) {
		t.Fatal("Vouch signed nothing")
	}
	if err := h.NC.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
}

// Who started a job, as the host can vouch for it: a signed start names its person, and the
// flow's next step inherits it; a plain publish, a forged claim, and a signature moved onto
// another message are "a NATS client" and make nobody a starter.
func TestStartedBy(t *testing.T) {
	h, _, applied := approvalFlow(t, "# approve\n")
	c := newClient(t, h)
	ctx := context.Background()

	h.Publish(bus.RunSubject("log"), `{}`, map[string]string{bus.HeaderMsgID: "plain-1"})
	if rec := h.Record("plain-1"); rec.StartedBy != "a NATS client" || rec.Starter != "" {
		t.Fatalf("plain publish: started_by %q, starter %q", rec.StartedBy, rec.Starter)
	}
	h.Publish(bus.RunSubject("log"), `{}`, map[string]string{bus.HeaderMsgID: "forged-1",
		bus.HeaderStartedBy: "user ada", bus.HeaderStarter: "ada", bus.HeaderStartedBySig: "0123456789abcdefghij"})
	if rec := h.Record("forged-1"); rec.StartedBy != "a NATS client (says user ada)" || rec.Starter != "" {
		t.Fatalf("forged start: started_by %q, starter %q", rec.StartedBy, rec.Starter)
	}
	// A real signature, for another message id: copied onto this one, it proves nothing.
	signed := nats.NewMsg(bus.RunSubject("log"))
	signed.Data = []byte(`{}`)
	signed.Header.Set(bus.HeaderMsgID, "signed-elsewhere")
	ids.Vouch(signed, ids.NewKey(h.Key).Derive, "user ada", "ada")
	h.Publish(bus.RunSubject("log"), `{}`, map[string]string{bus.HeaderMsgID: "moved-1", bus.HeaderStartedBy: "user ada",
		bus.HeaderStarter: "ada", bus.HeaderStartedBySig: signed.Header.Get(bus.HeaderStartedBySig)})
	if rec := h.Record("moved-1"); rec.Starter != "" || !strings.HasPrefix(rec.StartedBy, "a NATS client (says") {
		t.Fatalf("a signature moved onto another message: started_by %q, starter %q", rec.StartedBy, rec.Starter)
	}

	publishSigned(t, h, bus.RunSubject("plan"), "plan-ada", `{"db":"prod"}`, "user ada", "ada")
	if rec := waitingFor(t, h, "plan-ada"); rec.StartedBy != "user ada" || rec.Starter != "ada" {
		t.Fatalf("signed start: started_by %q, starter %q", rec.StartedBy, rec.Starter)
	}
	if _, err := c.Decide(ctx, "plan-ada", true, people.Operator("root@vm", "cli"), ""); err != nil {
		t.Fatal(err)
	}
	h.Eventually("apply ran", func() bool { return len(applied()) == 1 })
	recs, err := c.Jobs.Recent(ctx, jobs.Filter{Function: "apply"}, 0)
	if err != nil || len(recs) != 1 {
		t.Fatalf("apply's records %v, %v", recs, err)
	}
	step := h.Record(recs[0].ID)
	if step.StartedBy != "flow step plan (job plan-ada)" || step.Starter != "ada" || step.FlowID != "plan-ada" {
		t.Fatalf("the next step: started_by %q, starter %q, flow %s", step.StartedBy, step.Starter, step.FlowID)
	}
}

// TestDecideChecks: the hosts hold a decision to the decider's role, the gate's groups and the
// self-approval rule, say which refused it, and record every decision asked for in the audit
// stream; a user's own decide subject takes the user from the store, not from the body.
func TestDecideChecks(t *testing.T) {
	h, _, applied := approvalFlow(t, "# approve: timeout 1h by ops\n")
	ctx := context.Background()
	js, _ := jetstream.New(h.NC)
	if err := audit.Ensure(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	addUsers(t, h,
		people.User{Name: "ada", Role: people.Approver, Groups: []string{"ops"}},
		people.User{Name: "bob", Role: people.Admin, Groups: []string{"dev"}},
		people.User{Name: "vic", Role: people.Viewer, Groups: []string{"ops"}},
		people.User{Name: "dan", Role: people.Approver, Groups: []string{"ops"}})
	c := newClient(t, h)
	publishSigned(t, h, bus.RunSubject("plan"), "plan-1", `{}`, "user ada", "ada")
	if rec := waitingFor(t, h, "plan-1"); len(rec.Approval.Groups) != 1 || rec.Approval.Groups[0] != "ops" {
		t.Fatalf("the waiting record's groups: %+v", rec.Approval)
	}
	ada := people.User{Name: "ada", Role: people.Approver, Groups: []string{"ops"}}.Principal("token")
	_, err := c.Decide(ctx, "plan-1", true, ada, "")
	if !errors.Is(err, client.ErrRefused) || !strings.Contains(err.Error(), "you started this flow; someone else must decide its steps") {
		t.Fatalf("the starter deciding: %v", err)
	}
	bob := people.User{Name: "bob", Role: people.Admin, Groups: []string{"dev"}}.Principal("token")
	_, err = c.Decide(ctx, "plan-1", true, bob, "")
	if !errors.Is(err, client.ErrRefused) || !strings.Contains(err.Error(), "bob is in dev, not in the group(s) ops of this approval") {
		t.Fatalf("an admin outside the gate's groups: %v", err)
	}
	// vic's own subject, with a body that claims the admin: the store says viewer.
	rep := decideOn(t, h, bus.UserDecideSubject("vic"), jobs.DecideRequest{Job: "plan-1", Decision: "approve", Who: &people.Principal{Name: "root", Role: people.Admin}})
	if !rep.Refused || !strings.Contains(rep.Error, "vic is not an approver: the role viewer may not decide approvals") {
		t.Fatalf("a viewer on its own subject: %+v", rep)
	}
	rep = decideOn(t, h, bus.UserDecideSubject("eve"), jobs.DecideRequest{Job: "plan-1", Decision: "approve"})
	if !rep.Refused || !strings.Contains(rep.Error, `no such user "eve"`) {
		t.Fatalf("a subject no user has: %+v", rep)
	}
	rec := waitingFor(t, h, "plan-1")
	if rec.Approval.Decision != "" || len(applied()) != 0 {
		t.Fatalf("after four refusals the step is %s, %+v", rec.Status, rec.Approval)
	}
	rep = decideOn(t, h, bus.UserDecideSubject("dan"), jobs.DecideRequest{Job: "plan-1", Decision: "approve", Comment: "ok", Wait: true, Who: &people.Principal{Name: "someone else", Role: people.Admin}})
	if rep.Error != "" || rep.Record == nil || rep.Record.Status != jobtype.Succeeded || rep.Record.Approval.By != "dan" {
		t.Fatalf("dan, of ops, on his own subject: %+v", rep)
	}
	h.Eventually("apply ran", func() bool { return len(applied()) == 1 })
	_, err = c.Decide(ctx, "plan-1", false, people.Operator("root@vm", "cli"), "")
	if !errors.Is(err, client.ErrNotWaiting) || !strings.Contains(err.Error(), "job plan-1 was already approved by dan at ") {
		t.Fatalf("a decision after dan's: %v", err)
	}

	entries, err := audit.Read(ctx, js, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ who, face, act, err string }{
		{"ada", "web", "approval.approve", "you started this flow"},
		{"bob", "web", "approval.approve", "not in the group(s) ops"},
		{"vic", "nats", "approval.approve", "not an approver"},
		{"eve", "nats", "approval.approve", "no such user"},
		{"dan", "nats", "approval.approve", ""},
		{"root@vm", "cli", "approval.reject", "already approved by dan"},
	}
	if len(entries) != len(want) {
		t.Fatalf("%d audit entries, want %d: %+v", len(entries), len(want), entries)
	}
	for i, w := range want {
		e := entries[i]
		if e.Who != w.who || e.Face != w.face || e.Act != w.act || e.Target != "plan-1" || e.Host != "test" ||
			(w.err == "") != (e.Error == "") || !strings.Contains(e.Error, w.err) {
			t.Errorf("audit entry %d: %+v, want %+v", i, e, w)
		}
	}
}

func decideOn(t *testing.T, h *hosttest.H, subject string, req jobs.DecideRequest) jobs.DecideReply {
	t.Helper()
	body, _ := json.Marshal(req)
	m, err := h.NC.Request(subject, body, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return hosttest.Decode[jobs.DecideReply](t, m.Data)
}

// A group that no user has is a load warning naming it, and again when the users change.
func TestUnknownGroupWarned(t *testing.T) {
	h, _, _ := approvalFlow(t, "# approve: by ops,ghosts\n")
	w := h.WaitLog("an approval names a group that no user has", 0)
	if s := w.ContextMap()["warning"].(string); !strings.Contains(s, "plan.sh:1: approve: by names the group(s) ops, ghosts, which no user has") {
		t.Fatalf("load warning %q", s)
	}
	addUsers(t, h, people.User{Name: "ada", Role: people.Approver, Groups: []string{"ops"}})
	w = h.WaitLog("the users changed: an approval names a group that no user has", 0)
	if s := w.ContextMap()["warning"].(string); !strings.Contains(s, "group(s) ghosts, which no user has") || strings.Contains(s, "ops") {
		t.Fatalf("warning after a user change %q", s)
	}
}

// The operator (no person) and a signed link (a capability sent to someone) are not held to a
// gate's groups; the record names the link as such.
func TestOperatorAndLinkPassGroups(t *testing.T) {
	h, _, _ := approvalFlow(t, "# approve: by ops\n")
	c := newClient(t, h)
	ctx := context.Background()
	h.Publish(bus.RunSubject("plan"), `{}`, map[string]string{bus.HeaderMsgID: "plan-op"})
	h.Publish(bus.RunSubject("plan"), `{}`, map[string]string{bus.HeaderMsgID: "plan-link"})
	waitingFor(t, h, "plan-op")
	waitingFor(t, h, "plan-link")
	if rec, err := c.Decide(ctx, "plan-op", true, people.Operator("root@vm", "cli"), ""); err != nil || rec.Approval.By != "root@vm" {
		t.Fatalf("the operator: %+v, %v", rec, err)
	}
	link := people.Principal{Name: "a signed link (from 10.0.0.5:4242)", Role: people.Approver, Via: "link"}
	if rec, err := c.Decide(ctx, "plan-link", false, link, ""); err != nil || rec.Approval.By != link.Name || rec.Status != jobtype.Failed {
		t.Fatalf("a signed link: %+v, %v", rec, err)
	}
}

// A flow started straight from a NATS client has no starter a host can vouch for, so a user
// whose own NATS login may publish its first step may have started it: that user may not
// decide it, whatever the trigger claims; a user whose login may not publish it may.
func TestUnvouchedStartKeepsPossibleStartersOut(t *testing.T) {
	h, _, applied := approvalFlow(t, "# approve: timeout 1h by ops\n")
	ctx := context.Background()
	addUsers(t, h,
		people.User{Name: "nia", Role: people.Approver, Groups: []string{"ops"}, NATS: true},
		people.User{Name: "pia", Role: people.Approver, Groups: []string{"ops"}, NATS: true, Functions: "deploy-*"})
	c := newClient(t, h)
	// What bob's own login would send: a plain trigger, claiming nothing a host signed.
	h.Publish(bus.RunSubject("plan"), `{}`, map[string]string{bus.HeaderMsgID: "plan-9", "Started-By": "user pia"})
	if rec := waitingFor(t, h, "plan-9"); rec.Starter != "" || !strings.HasPrefix(rec.StartedBy, "a NATS client") {
		t.Fatalf("the unsigned trigger's record: started_by %q, starter %q", rec.StartedBy, rec.Starter)
	}
	nia := people.User{Name: "nia", Role: people.Approver, Groups: []string{"ops"}}.Principal("token")
	_, err := c.Decide(ctx, "plan-9", true, nia, "")
	if !errors.Is(err, client.ErrRefused) || !strings.Contains(err.Error(), "you may have started this flow") || !strings.Contains(err.Error(), "the NATS login of nia may publish its first step (plan)") {
		t.Fatalf("nia, whose login may publish plan: %v", err)
	}
	// pia's login may publish deploy-* only (the claim naming her changes nothing): she decides.
	pia := people.User{Name: "pia", Role: people.Approver, Groups: []string{"ops"}}.Principal("token")
	done, err := c.Decide(ctx, "plan-9", true, pia, "")
	if err != nil || done.Approval.By != "pia" {
		t.Fatalf("pia: %v %+v", err, done)
	}
	h.Eventually("apply ran", func() bool { return len(applied()) == 1 })
}
