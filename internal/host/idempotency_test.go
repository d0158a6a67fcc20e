package host_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/host"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// paidBy answers with who paid, from the arguments, and a detail only that payer may see.
func paidBy(_ context.Context, j *jobtype.Job) *jobtype.Outcome {
	var args struct{ User string }
	if err := json.Unmarshal(j.Payload, &args); err != nil {
		return &jobtype.Outcome{Err: &jobtype.TerminalError{Err: err}}
	}
	return &jobtype.Outcome{Result: []byte(`{"paid_by":"` + args.User + `","card":"card-of-` + args.User + `"}`)}
}

// The red team's attack on idempotency keys: Alice calls with Nats-Msg-Id order-1001; Mallory
// sends {"user":"mallory"} under the same id, on agent.call or with Idempotency-Key on POST
// /run, and got Alice's result. An id is bound to the arguments it first came with (a hash in
// the job record): other arguments under it get an error, never the earlier result, and never
// run; the same arguments again still get the recorded outcome.
func TestIdempotencyKeyBindsItsArguments(t *testing.T) {
	unblock := make(chan struct{})
	fake := newFake().on("order", paidBy).on("held", func(ctx context.Context, j *jobtype.Job) *jobtype.Outcome {
		if strings.Contains(string(j.Payload), "blocker") {
			select {
			case <-unblock:
			case <-ctx.Done():
			}
		}
		return paidBy(ctx, j)
	})
	h := hosttest.NewEngine(t, map[string]string{"order.sh": "echo\n", "held.sh": "# concurrency: 1\necho\n"}, fake,
		func(c *host.Config) { c.Streams.Duplicates = time.Second })
	call := func(id, payload string) *nats.Msg {
		m := nats.NewMsg(bus.CallSubject("order"))
		m.Header.Set(bus.HeaderMsgID, id)
		return h.CallMsg(m, payload)
	}
	const alice, mallory = `{"user":"alice"}`, `{"user":"mallory"}`
	refused := func(t *testing.T, r *nats.Msg, id string) {
		t.Helper()
		body := string(r.Data)
		if strings.Contains(body, "alice") || r.Header.Get(bus.HeaderJobStatus) != "failed" ||
			!strings.Contains(body, `job id \"`+id+`\" of function \"order\" was already sent with other arguments`) {
			t.Fatalf("Mallory, under Alice's id, got %s (status %s); want a refusal without Alice's result", body, r.Header.Get(bus.HeaderJobStatus))
		}
	}

	if r := call("order-1001", alice); !strings.Contains(string(r.Data), "card-of-alice") {
		t.Fatalf("Alice's own call: %s", r.Data)
	}
	t.Run("agent.call while the stream remembers the id", func(t *testing.T) {
		refused(t, call("order-1001", mallory), "order-1001")
	})
	t.Run("the same arguments again get the recorded result", func(t *testing.T) {
		// Other spacing is the same call.
		if r := call("order-1001", `{ "user": "alice" }`); !strings.Contains(string(r.Data), "card-of-alice") || r.Header.Get(bus.HeaderJobStatus) != "succeeded" {
			t.Fatalf("Alice's repeat: %s (status %s)", r.Data, r.Header.Get(bus.HeaderJobStatus))
		}
	})
	t.Run("agent.call and agent.run after the stream forgot the id", func(t *testing.T) {
		// Once the one-second window has passed, Mallory's trigger is stored and reaches a host,
		// which must refuse it from the record. Every answer on the way is a refusal.
		before := h.Logs.FilterMessageSnippet("trigger refused").Len()
		h.Eventually("a host refuses Mallory's stored trigger", func() bool {
			refused(t, call("order-1001", mallory), "order-1001")
			return h.Logs.FilterMessageSnippet("trigger refused").Len() > before
		})
		e := h.WaitLog("trigger refused: its message id names another function's job, or a job sent with other arguments", 0)
		if !strings.Contains(e.ContextMap()["error"].(string), "already sent with other arguments") {
			t.Fatalf("refusal logged as %v", e.ContextMap())
		}
		results := h.Sub("agent.result.order")
		h.Publish("agent.run.order", mallory, map[string]string{bus.HeaderMsgID: "order-1001"})
		h.Publish("agent.run.order", `{"user":"barrier"}`, map[string]string{bus.HeaderMsgID: "barrier"})
		if got := h.Next(results); got.Header.Get(bus.HeaderJobID) != "barrier" {
			t.Fatalf("Mallory's agent.run under Alice's id ran: %s %s", got.Header.Get(bus.HeaderJobID), got.Data)
		}
	})
	if n := len(fake.attempts("order-1001")); n != 1 {
		t.Fatalf("order-1001 ran %d times, want once (Alice's)", n)
	}
	if r := h.Record("order-1001"); !strings.Contains(string(r.Result), "card-of-alice") || r.ArgsSHA256 != jobs.ArgsHash([]byte(alice)) {
		t.Fatalf("Alice's record was changed: %+v", r)
	}

	t.Run("POST /run with Idempotency-Key", func(t *testing.T) {
		web := httptest.NewServer(h.Web())
		defer web.Close()
		key := map[string]string{"Idempotency-Key": "order-2002"}
		if status, body, _ := hosttest.Post(t, web.URL+"/run/order?wait=30s", alice, key); status != 200 || !strings.Contains(body, "card-of-alice") {
			t.Fatalf("Alice: %d %s", status, body)
		}
		for _, wait := range []string{"", "?wait=30s"} {
			status, body, _ := hosttest.Post(t, web.URL+"/run/order"+wait, mallory, key)
			if status != 409 || strings.Contains(body, "alice") || !strings.Contains(body, "already sent with other arguments") {
				t.Fatalf("Mallory with Alice's key%s: %d %s; want 409 without Alice's result", wait, status, body)
			}
		}
		if status, body, _ := hosttest.Post(t, web.URL+"/run/order?wait=30s", alice, key); status != 200 || !strings.Contains(body, "card-of-alice") {
			t.Fatalf("Alice's repeat: %d %s", status, body)
		}
		if n := len(fake.attempts("order-2002")); n != 1 {
			t.Fatalf("order-2002 ran %d times, want once", n)
		}

		// Alice's trigger published straight on the bus waits behind another job: it has no
		// record yet, only its place in the stream. Mallory's call under its id must not wait
		// for it and be answered with Alice's outcome.
		results := h.Sub("agent.result.held")
		h.Publish("agent.run.held", `{"user":"blocker"}`, map[string]string{bus.HeaderMsgID: "blocker"})
		h.Eventually("the blocker runs", func() bool { return len(fake.attempts("blocker")) == 1 })
		h.Publish("agent.run.held", alice, map[string]string{bus.HeaderMsgID: "order-4004"})
		status, body, _ := hosttest.Post(t, web.URL+"/run/held?wait=30s", mallory, map[string]string{"Idempotency-Key": "order-4004"})
		if status != 409 || strings.Contains(body, "alice") || !strings.Contains(body, "cannot be compared") {
			t.Fatalf("Mallory under the id of Alice's waiting trigger: %d %s; want 409", status, body)
		}
		close(unblock)
		for range 2 {
			h.Next(results)
		}
		if r := h.Record("order-4004"); !strings.Contains(string(r.Result), "card-of-alice") || r.ArgsSHA256 != jobs.ArgsHash([]byte(alice)) {
			t.Fatalf("Alice's waiting trigger: %+v", r)
		}
		if runs := fake.attempts("order-4004"); len(runs) != 1 {
			t.Fatalf("order-4004 ran %d times", len(runs))
		}
	})
}
