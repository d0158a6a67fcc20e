package dashboard_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/audit"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// The Audit page lists what AGENT_AUDIT holds, newest first, narrowed by since and user.
func TestAuditPage(t *testing.T) {
	h := hosttest.NewEngine(t, map[string]string{"hello.sh": "echo\n"}, fakeRunner{})
	js, err := jetstream.New(h.NC)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := audit.Ensure(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	// Appended now, in this order: since selects by the time the stream recorded an entry.
	for _, e := range []audit.Entry{
		{Who: "ada", Face: "web", Act: "secret.set", Target: "api_key"},
		{Who: "rob", Face: "cli", Act: "job.cancel", Target: "j-1", Error: "forbidden: rob is viewer"},
		{Who: "ada", Face: "web", Act: "approval.approve", Target: "plan-1"},
	} {
		if err := audit.Append(ctx, js, e); err != nil {
			t.Fatal(err)
		}
	}
	handler := h.Web()
	page := func(query string) string {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/audit"+query, nil)
		req.Host, req.RemoteAddr = "127.0.0.1:8080", "127.0.0.1:40000"
		handler.ServeHTTP(rec, req)
		if rec.Code != 200 {
			t.Fatalf("/audit%s: %d %s", query, rec.Code, rec.Body)
		}
		return rec.Body.String()
	}
	body := page("")
	approve, cancel, set := strings.Index(body, "approval.approve"), strings.Index(body, "job.cancel"), strings.Index(body, "secret.set")
	if approve < 0 || cancel < 0 || set < 0 || !(approve < cancel && cancel < set) {
		t.Fatalf("want the three acts newest first (approve, cancel, set); at %d, %d, %d in:\n%s", approve, cancel, set, body)
	}
	if !strings.Contains(body, `class="refused"`) || !strings.Contains(body, "refused: forbidden: rob is viewer") {
		t.Errorf("the refused act is not marked as refused:\n%s", body)
	}
	if body := page("?user=ada"); strings.Contains(body, "job.cancel") || !strings.Contains(body, "secret.set") || !strings.Contains(body, "approval.approve") {
		t.Errorf("?user=ada shows other people's acts or misses hers:\n%s", body)
	}
	if body := page("?since=1h"); strings.Count(body, `<tr data-seq=`) != 3 {
		t.Errorf("?since=1h does not show the three acts of a moment ago:\n%s", body)
	}
	tomorrow := time.Now().AddDate(0, 0, 1).Format(time.DateOnly)
	if body := page("?since=" + tomorrow); strings.Contains(body, `<tr data-seq=`) || !strings.Contains(body, "Nothing recorded that matches.") {
		t.Errorf("?since=%s shows acts:\n%s", tomorrow, body)
	}
}
