package host_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/host"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/people"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// approvalFlow: plan waits for a decision before apply (if the plan is risky) or log (else).
func approvalFlow(t *testing.T, approve string) (*hosttest.H, *fakeRunner, func() []string) {
	var mu sync.Mutex
	var applied []string
	fake := newFake().on("plan", result(`{"change":"drop table","risky":true}`)).
		on("apply", func(_ context.Context, j *jobtype.Job) *jobtype.Outcome {
			mu.Lock()
			applied = append(applied, string(j.Payload))
			mu.Unlock()
			return &jobtype.Outcome{Result: []byte(`"applied"`)}
		})
	h := hosttest.NewEngine(t, map[string]string{
		"plan.sh":  approve + "# next: agent.run.apply if result.risky\n# next: agent.run.log else\necho\n",
		"apply.sh": "echo\n", "log.sh": "echo\n",
	}, fake, func(c *host.Config) { c.ApprovalURL = "http://host.test:8080" })
	return h, fake, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), applied...)
	}
}

func waitingFor(t *testing.T, h *hosttest.H, id string) *jobs.Record {
	t.Helper()
	var rec *jobs.Record
	h.Eventually("job "+id+" waits for a decision", func() bool {
		var err error
		rec, err = h.Store.Get(context.Background(), id)
		return err == nil && rec.Status == jobtype.Waiting
	})
	return rec
}

// A step with approve: announces its result and waits; approved, its next steps get the result
// with the decision in it; a second decision is refused and changes nothing.
func TestEngineApprove(t *testing.T) {
	h, fake, applied := approvalFlow(t, "# approve\n")
	announced := h.Sub(bus.ApprovalSubject("plan"))
	c := newClient(t, h)
	ctx := context.Background()
	h.Publish(bus.RunSubject("plan"), `{"db":"prod"}`, map[string]string{bus.HeaderMsgID: "plan-1"})
	ev := hosttest.Decode[host.ApprovalEvent](t, h.Next(announced).Data)
	if ev.JobID != "plan-1" || ev.Function != "plan" || !strings.Contains(string(ev.Result), "drop table") ||
		!strings.HasPrefix(ev.ApproveURL, "http://host.test:8080/approvals/plan-1?decision=approve&expires=") || !strings.Contains(ev.RejectURL, "decision=reject") ||
		ev.Expires.Before(time.Now().Add(23*time.Hour)) {
		t.Fatalf("announcement %+v", ev)
	}
	rec := waitingFor(t, h, "plan-1")
	if string(rec.Args) != `{"db":"prod"}` || rec.Approval == nil || rec.Approval.Timer == 0 || fake.count("apply") != 0 {
		t.Fatalf("waiting record %+v (apply ran %d times)", rec, fake.count("apply"))
	}
	if waiting, err := c.Approvals(ctx); err != nil || len(waiting) != 1 || waiting[0].ID != "plan-1" {
		t.Fatalf("approvals %v, %v", waiting, err)
	}
	done, err := c.Decide(ctx, "plan-1", true, people.Operator("ada", "test"), "looks fine")
	if err != nil || done.Status != jobtype.Succeeded || done.Approval.Decision != jobs.Approved || done.Approval.By != "ada" {
		t.Fatalf("approve: %+v, %v", done, err)
	}
	h.Eventually("apply ran", func() bool { return len(applied()) == 1 })
	var got struct {
		Change   string
		Approval struct{ By, Comment string }
	}
	if err := json.Unmarshal([]byte(applied()[0]), &got); err != nil || got.Change != "drop table" || got.Approval.By != "ada" || got.Approval.Comment != "looks fine" {
		t.Fatalf("apply got %s (%v)", applied()[0], err)
	}
	if _, err := c.Decide(ctx, "plan-1", false, people.Operator("bob", "test"), ""); err == nil || !strings.Contains(err.Error(), "not waiting for a decision") {
		t.Fatalf("a second decision: %v", err)
	}
	if rec := h.Record("plan-1"); rec.Status != jobtype.Succeeded || rec.Approval.By != "ada" {
		t.Fatalf("record after a second decision %+v", rec)
	}
	// The run ended when the step began to wait; the decision, later, ends the step: its run
	// time leaves the wait for a person out, in the record and in the index.
	decided := h.Record("plan-1")
	if rec.RunEnded.IsZero() || !rec.RunEnded.Equal(rec.Finished) || !decided.RunEnded.Equal(rec.RunEnded) || decided.Finished.Before(decided.RunEnded) ||
		decided.RunTime() != rec.RunEnded.Sub(rec.Started) {
		t.Fatalf("run ended %v (waiting, finished %v), then %v, decided %v, run time %v", rec.RunEnded, rec.Finished, decided.RunEnded, decided.Finished, decided.RunTime())
	}
	if sums, err := h.Store.Summaries(ctx, jobs.Filter{Function: "plan"}); err != nil || len(sums) != 1 || !sums[0].RunEnded.Equal(rec.RunEnded) {
		t.Fatalf("the index of plan-1: %+v, %v; want its run's end", sums, err)
	}
	settled(t, h, "plan") // the decision removed the approval's timer
}

// Rejected, the step fails as any: an error event saying who rejected, a dead letter, and no
// next step.
func TestEngineReject(t *testing.T) {
	h, fake, _ := approvalFlow(t, "# approve\n")
	errs := h.Sub(bus.ErrorSubject("plan"))
	c := newClient(t, h)
	h.Publish(bus.RunSubject("plan"), `{}`, map[string]string{bus.HeaderMsgID: "plan-2"})
	waitingFor(t, h, "plan-2")
	done, err := c.Decide(context.Background(), "plan-2", false, people.Operator("bob", "test"), "too risky")
	if err != nil || done.Status != jobtype.Failed || !strings.Contains(done.Error, "rejected by bob: too risky") {
		t.Fatalf("reject: %+v, %v", done, err)
	}
	if ev := hosttest.Decode[jobs.ErrorEvent](t, h.Next(errs).Data); !strings.Contains(ev.Error, "rejected by bob") {
		t.Fatalf("error event %+v", ev)
	}
	if dl, err := c.DeadLetter(context.Background(), "plan-2"); err != nil || !strings.Contains(dl.Error, "rejected by bob") {
		t.Fatalf("dead letter %+v, %v", dl, err)
	}
	if n := fake.count("apply") + fake.count("log"); n != 0 {
		t.Fatalf("%d next steps ran after a rejection", n)
	}
}

// No decision within the timeout: the step fails, saying it timed out.
func TestEngineApprovalTimesOut(t *testing.T) {
	h, fake, _ := approvalFlow(t, "# approve: timeout 2s\n")
	h.Publish(bus.RunSubject("plan"), `{}`, map[string]string{bus.HeaderMsgID: "plan-3"})
	waitingFor(t, h, "plan-3")
	rec := h.Record("plan-3")
	if rec.Status != jobtype.Failed || !strings.Contains(rec.Error, "the approval timed out") || fake.count("apply") != 0 {
		t.Fatalf("record %+v", rec)
	}
	if rec.Finished.Before(rec.Approval.Expires) {
		t.Fatalf("timed out at %s, before it expired at %s", rec.Finished, rec.Approval.Expires)
	}
}
