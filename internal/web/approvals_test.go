package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/host"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// The signed links of an approval, without a login: a GET only asks, the POST decides, once;
// a forged, expired or reused link is refused.
func TestApprovalLinks(t *testing.T) {
	fake := hosttest.NewRuns().On("plan", func(context.Context, *jobtype.Job) *jobtype.Outcome {
		return &jobtype.Outcome{Result: []byte(`{"change":"x"}`)}
	})
	h := hosttest.NewEngine(t, map[string]string{"plan.sh": "# approve\n# next: agent.run.apply\necho\n", "apply.sh": "echo\n"}, fake)
	srv := serve(t, h, nil)
	sign := ids.NewKey(h.Key).Derive
	h.Publish(bus.RunSubject("plan"), `{}`, map[string]string{bus.HeaderMsgID: "plan-l"})
	var expires time.Time
	h.Eventually("plan waits for a decision", func() bool {
		rec, err := h.Store.Get(context.Background(), "plan-l")
		if err == nil && rec.Status == jobtype.Waiting {
			expires = rec.Approval.Expires
		}
		return !expires.IsZero()
	})
	approve := host.ApprovalLink(srv.URL, sign, "plan-l", "approve", expires)
	reject := host.ApprovalLink(srv.URL, sign, "plan-l", "reject", expires)

	if status, body := get(t, approve); status != 200 || !strings.Contains(body, "Approve job plan-l") || !strings.Contains(body, `<form method="post">`) {
		t.Fatalf("GET of the approve link: %d %s", status, body)
	}
	if rec, _ := h.Store.Get(context.Background(), "plan-l"); rec.Status != jobtype.Waiting {
		t.Fatalf("a GET decided: %+v", rec)
	}
	forged := strings.Replace(reject, "sig=", "sig=x", 1)
	if status, _, _ := hosttest.Post(t, forged, "", nil); status != http.StatusForbidden {
		t.Fatalf("a forged link: %d, want 403", status)
	}
	otherJob := strings.Replace(approve, "/approvals/plan-l", "/approvals/plan-m", 1)
	if status, _ := get(t, otherJob); status != http.StatusForbidden {
		t.Fatalf("a link moved to another job: %d, want 403", status)
	}
	past := host.ApprovalLink(srv.URL, sign, "plan-l", "approve", time.Now().Add(-time.Minute))
	if status, body := get(t, past); status != http.StatusGone || !strings.Contains(body, "expired") {
		t.Fatalf("an expired link: %d %s", status, body)
	}

	form := url.Values{"comment": {"ship it"}}.Encode()
	status, body, _ := hosttest.Post(t, approve, form, map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
	if status != 200 || !strings.Contains(body, "approved") {
		t.Fatalf("POST of the approve link: %d %s", status, body)
	}
	rec := h.Record("plan-l")
	if rec.Status != jobtype.Succeeded || rec.Approval.Comment != "ship it" || !strings.Contains(rec.Approval.By, "a signed link") {
		t.Fatalf("record %+v %+v", rec, rec.Approval)
	}
	h.Eventually("apply ran", func() bool { return fake.Count(ids.NewKey(h.Key).Next("plan-l", bus.RunSubject("apply"))) == 1 })
	for _, link := range []string{approve, reject} {
		if status, body, _ := hosttest.Post(t, link, "", nil); status != http.StatusGone || !strings.Contains(body, "Already decided") {
			t.Fatalf("a used link: %d %s, want 410", status, body)
		}
	}
}
