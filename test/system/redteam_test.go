package system_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/hooks"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// The red team's attacks on what the host does with its own rights on a caller's behalf. Each
// is written as the attack: it failed on the host before these holes were closed.

// Row 1: a trigger's Reply-To header named where the host published the result: another
// function's trigger subject, a job record, the JetStream API.
func TestRedTeamReplyToCannotDirectAPublish(t *testing.T) {
	h := hosttest.New(t, map[string]string{
		"echo.sh":   "# sandbox\ncat\n",
		"victim.sh": "# sandbox\necho '\"victim ran\"'\n",
	})
	targets := []string{"agent.run.victim", "$KV.agent_jobs.forged-by-reply", "$JS.API.STREAM.DELETE.OBJ_agent_volumes"}
	seen := subAll(t, h, targets)
	for i, target := range targets {
		// As `nats pub agent.run.echo ... -H Reply-To:<target>`.
		id := fmt.Sprintf("reply-run-%d", i)
		h.Publish("agent.run.echo", `{"v":{}}`, map[string]string{bus.HeaderReplyTo: target, bus.HeaderMsgID: id})
		if r := h.Record(id); r.Status != "succeeded" {
			t.Fatalf("the echo job itself must still run: %+v", r)
		}
		// As `nats pub agent.call.echo ... -H Reply-To:<target>`: a call with no inbox.
		id = fmt.Sprintf("reply-call-%d", i)
		m := nats.NewMsg("agent.call.echo")
		m.Data = []byte(`{"v":{}}`)
		m.Header.Set(bus.HeaderReplyTo, target)
		m.Header.Set(bus.HeaderMsgID, id)
		if err := h.NC.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
		h.Record(id)
	}
	// A call with a real inbox and a forged header: the answer goes to the inbox only.
	m := nats.NewMsg("agent.call.echo")
	m.Header.Set(bus.HeaderReplyTo, "agent.run.victim")
	if reply := h.CallMsg(m, `{"ok":1}`); !strings.Contains(string(reply.Data), `"ok":1`) {
		t.Fatalf("the caller's own inbox got %s", reply.Data)
	}
	// The host wrote each record after its reply would have gone out; a message sent now on
	// each target arrives after anything the host sent there.
	noHostPublish(t, h, seen, targets)
	if _, err := jetstreamFor(t, h).Stream(context.Background(), "AGENT_RUN"); err != nil {
		t.Fatalf("the trigger stream is gone: %v", err)
	}
}

// subAll watches every subject an attack tries to make the host publish on.
func subAll(t *testing.T, h *hosttest.H, subjects []string) <-chan *nats.Msg {
	t.Helper()
	seen := make(chan *nats.Msg, 64)
	for _, s := range subjects {
		sub, err := h.NC.ChanSubscribe(s, seen)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sub.Unsubscribe() })
	}
	if err := h.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	return seen
}

// noHostPublish sends a barrier on each subject: anything the host published there before
// (it has done all it would by now) arrives ahead of the barriers.
func noHostPublish(t *testing.T, h *hosttest.H, seen <-chan *nats.Msg, subjects []string) {
	t.Helper()
	for _, s := range subjects {
		h.Publish(s, `"barrier"`, nil)
	}
	for range subjects {
		if got := h.Next(seen); string(got.Data) != `"barrier"` {
			t.Fatalf("the host published on %s, a subject a caller chose: %s", got.Subject, got.Data)
		}
	}
}

func jetstreamFor(t *testing.T, h *hosttest.H) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(h.NC)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// Row 3: a job id used for one function returned its record to the caller of another.
func TestRedTeamJobIDsCannotCrossFunctions(t *testing.T) {
	h := hosttest.New(t, map[string]string{
		"victim.sh": "# sandbox\necho '{\"secret_result\":\"victim-only\"}'\n",
		"hello.sh":  "# sandbox\n# concurrency: 1\necho '\"hello\"'\n",
	}, func(c *app.Config) { c.Streams.Duplicates = time.Second })
	call := func(fn, id string) *nats.Msg {
		m := nats.NewMsg("agent.call." + fn)
		m.Header.Set(bus.HeaderMsgID, id)
		return h.CallMsg(m, `{}`)
	}
	if r := call("victim", "shared-id"); !strings.Contains(string(r.Data), "victim-only") {
		t.Fatalf("victim's own call: %s", r.Data)
	}
	// While the stream still remembers the id: the call is answered from the record, which is
	// victim's, so it is refused.
	wantRefusal := func(r *nats.Msg) {
		t.Helper()
		body := string(r.Data)
		if strings.Contains(body, "victim-only") || r.Header.Get(bus.HeaderJobStatus) != "failed" ||
			!strings.Contains(body, `already belongs to function \"victim\"`) {
			t.Fatalf("hello's caller with victim's job id got %s (status %s)", body, r.Header.Get(bus.HeaderJobStatus))
		}
	}
	wantRefusal(call("hello", "shared-id"))

	// After the stream forgot it (a host restart, or the window passed): the trigger is stored,
	// and the host refuses it when it is delivered.
	results := h.Sub("agent.result.hello")
	js := jetstreamFor(t, h)
	natstest.Eventually(t, "the stream stores the id again (its one-second window passed)", func() bool {
		m := nats.NewMsg("agent.run.hello")
		m.Header.Set(bus.HeaderMsgID, "shared-id")
		ack, err := js.PublishMsg(context.Background(), m)
		if err != nil {
			t.Fatal(err)
		}
		return !ack.Duplicate // stored: JetStream itself says the window has passed
	})
	h.Publish("agent.run.hello", `{}`, map[string]string{bus.HeaderMsgID: "barrier"})
	if got := h.Next(results); got.Header.Get(bus.HeaderJobID) != "barrier" {
		t.Fatalf("hello ran under victim's job id: %s %s", got.Header.Get(bus.HeaderJobID), got.Data)
	}
	if r := h.Record("shared-id"); r.Function != "victim" || !strings.Contains(string(r.Result), "victim-only") {
		t.Fatalf("victim's record was overwritten: %+v", r)
	}
}

// Row 4: an outside publisher took the message ids of upcoming schedule ticks (they were
// "sched-<function>-<unix second>"), and those ticks never ran.
func TestRedTeamScheduledTicksCannotBePreempted(t *testing.T) {
	h := hosttest.New(t, map[string]string{"tick.sh": "# sandbox\n# schedule: @every 1s\necho '\"tick\"'\n"})
	results := h.Sub("agent.result.tick")
	from := time.Now().Truncate(time.Second).Add(2 * time.Second)
	to := from.Add(5 * time.Second)
	forged := map[string]bool{}
	for s := from; !s.After(to); s = s.Add(time.Second) {
		id := fmt.Sprintf("sched-tick-%d", s.Unix())
		forged[id] = true
		h.Publish("agent.run.tick", `{}`, map[string]string{bus.HeaderMsgID: id})
	}
	// Ticks inside the attacked seconds must run under ids nobody outside could send first.
	ticks := 0
	for ticks < 3 {
		m := h.Next(results)
		id := m.Header.Get(bus.HeaderJobID)
		if forged[id] {
			continue
		}
		r := h.Record(id)
		if !r.Enqueued.Before(from) && r.Enqueued.Before(to) {
			ticks++
		} else if r.Enqueued.After(to) {
			t.Fatalf("no tick ran between %s and %s: the forged ids suppressed them", from.Format(time.TimeOnly), to.Format(time.TimeOnly))
		}
	}
}

// Row 4, for webhooks: a message sent ahead under a delivery's id made the stream drop the
// delivery itself as a duplicate.
func TestRedTeamWebhookDeliveriesCannotBePreempted(t *testing.T) {
	h := hosttest.New(t, map[string]string{"onhook.sh": "# sandbox\n# on: webhook.public\ncat\n"},
		func(c *app.Config) { c.Hooks = []hooks.Source{{Name: "public", Auth: hooks.Open}} })
	web := httptest.NewServer(h.Web())
	defer web.Close()
	results := h.Sub("agent.result.onhook")
	for _, subject := range []string{"webhook.public", "agent.run.onhook"} {
		h.Publish(subject, `{"forged":true}`, map[string]string{bus.HeaderMsgID: "delivery-1"})
	}
	req, _ := http.NewRequest("POST", web.URL+"/hooks/public", strings.NewReader(`{"genuine":true}`))
	req.Header.Set("Idempotency-Key", "delivery-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("delivery: %d", resp.StatusCode)
	}
	for {
		m := h.Next(results)
		if strings.Contains(string(m.Data), "genuine") {
			break
		}
	}
}

// Row 3, the guessable part: job ids the host and CLI make were sequential xids, so a caller
// could take the next one before the real job.
func TestRedTeamFreshJobIDsAreNotSequential(t *testing.T) {
	a, b := ids.New(), ids.New()
	if a[:14] == b[:14] {
		t.Fatalf("consecutive job ids %s and %s share 14 characters: the next one can be guessed", a, b)
	}
}

// Our own attacks, in the same spirit: a caller with only publish rights trying to reach what
// the host can. Each is listed in docs/security.md with what it gets.

// Own attack A: a core request whose reply subject is not an inbox (`nats req` with
// `--reply '$KV.agent_jobs.x'`, or `agent.run.victim`): the host answered there with its own
// rights, writing a job record or starting a function. Now the call is refused unanswered.
func TestRedTeamReplySubjectMustBeAnInbox(t *testing.T) {
	h := hosttest.New(t, map[string]string{
		"echo.sh":   "# sandbox\ncat\n",
		"victim.sh": "# sandbox\necho '\"victim ran\"'\n",
	})
	const refused = "call refused: its reply subject is not an inbox; a request's reply subject must be one (as `nats req` makes), never a subject that acts"
	// The hosts' own inbox too: a reply there could pose as the answer to a host's request.
	targets := []string{"$KV.agent_jobs.reply-forged", "agent.run.victim", "$JS.API.STREAM.PURGE.AGENT_RUN", "webhook.github", bus.HostsInboxPrefix + ".forged.1"}
	seen := subAll(t, h, targets)
	for i, target := range targets {
		if err := h.NC.PublishMsg(&nats.Msg{Subject: "agent.call.echo", Reply: target, Data: []byte(`{"x":1}`)}); err != nil {
			t.Fatal(err)
		}
		if e := h.WaitLog(refused, i); e.ContextMap()["reply"] != target {
			t.Fatalf("refusal logged for %v, want %s", e.ContextMap()["reply"], target)
		}
	}
	// An ordinary request still works. It runs before the barrier: the barrier's own publish on
	// $JS.API.STREAM.PURGE.AGENT_RUN is a real purge, which JetStream carries out later, on its
	// own; a call queued after it could be purged before it runs.
	if r := h.Call("echo", `{"ok":1}`); !strings.Contains(string(r.Data), `"ok":1`) {
		t.Fatalf("a normal call after the refusals: %s", r.Data)
	}
	noHostPublish(t, h, seen, targets)
}

// Own attack B: JetStream control headers on a trigger (Nats-Expected-Stream passes the
// trigger's own publish) were copied onto the dead letter the host publishes when the job
// fails, which JetStream then refused: the job was handed back for ever instead of ending.
func TestRedTeamControlHeadersCannotSteerHostPublishes(t *testing.T) {
	h := hosttest.New(t, map[string]string{"fail.sh": "# sandbox\necho broken >&2\nexit 3\n"})
	// (Headers that JetStream checks against the trigger stream itself, such as Nats-Rollup,
	// get the trigger refused at its own publish; this one passes it.)
	for i, hdr := range []map[string]string{{"Nats-Expected-Stream": "AGENT_RUN"}} {
		id := fmt.Sprintf("steer-%d", i)
		hdr[bus.HeaderMsgID] = id
		h.Publish("agent.run.fail", `{}`, hdr)
		if r := h.Record(id); r.Status != "failed" || !strings.Contains(r.Error, "exit") {
			t.Fatalf("job %s: %+v", id, r)
		}
	}
	// Through agent.call, the host's own publish of the trigger carries none of them either.
	m := nats.NewMsg("agent.call.fail")
	m.Header.Set("Nats-Expected-Last-Sequence", "1")
	m.Header.Set("Nats-Expected-Stream", "AGENT_DEAD")
	if r := h.CallMsg(m, `{}`); r.Header.Get(bus.HeaderJobStatus) != "failed" || !strings.Contains(string(r.Data), "exit") {
		t.Fatalf("a call with control headers: %s %v", r.Data, r.Header)
	}
}

// Own attack C: message ids shaped as paths and wildcards. They name jobs, logs subjects and
// directories: the host maps them to safe ids and runs the job, creating nothing outside.
func TestRedTeamMessageIDsCannotNamePathsOrSubjects(t *testing.T) {
	h := hosttest.New(t, map[string]string{"echo.sh": "# sandbox\ncat\n"})
	results := h.Sub("agent.result.echo")
	marker := "pwned-" + ids.New()
	for _, id := range []string{"../../../../tmp/" + marker, "a.*.>", "x y\tz", strings.Repeat("a", 200)} {
		h.Publish("agent.run.echo", `{"id":"`+strings.ReplaceAll(id, "\t", `\t`)+`"}`, map[string]string{bus.HeaderMsgID: id})
		m := h.Next(results)
		if got := m.Header.Get(bus.HeaderJobID); !ids.Safe.MatchString(got) || strings.ContainsAny(got, "./*> ") {
			t.Fatalf("message id %q became job id %q", id, got)
		}
	}
	if _, err := os.Stat("/tmp/" + marker); err == nil {
		t.Fatalf("a message id created /tmp/%s", marker)
	}
}

// Own attack D: a volume name taken from the caller's arguments ($args[user]) that walks out
// of the store's namespace. The job fails with the rule, and nothing is mounted or committed.
func TestRedTeamArgumentVolumeNamesStayInTheirNamespace(t *testing.T) {
	h := hosttest.New(t, map[string]string{"notes.sh": "# sandbox\n# volume: notes-$args[user] data\necho hi > data/f\necho '\"wrote\"'\n"})
	for _, user := range []string{"../../etc", "a/b", "x\u0000y", "", strings.Repeat("u", 300)} {
		arg, _ := json.Marshal(map[string]string{"user": user})
		r := h.Call("notes", string(arg))
		if r.Header.Get(bus.HeaderJobStatus) != "failed" || !strings.Contains(string(r.Data), "not a safe volume name") {
			t.Fatalf("user %q: %s", user, r.Data)
		}
	}
	if r := h.Call("notes", `{"user":"ada"}`); r.Header.Get(bus.HeaderJobStatus) != "succeeded" {
		t.Fatalf("a valid name after the refusals: %s", r.Data)
	}
}

// Own attack E: a Flow-Id header that is not one subject token ("x.>") would have the host
// publish flow-tagged messages under it; it is dropped and the job starts its own flow.
func TestRedTeamFlowIDsAreTokens(t *testing.T) {
	h := hosttest.New(t, map[string]string{"echo.sh": "# sandbox\ncat\n"})
	results := h.Sub("agent.result.echo")
	for _, flow := range []string{"x.>", "a b", "../f", "*"} {
		h.Publish("agent.run.echo", `{}`, map[string]string{bus.HeaderFlowID: flow})
		m := h.Next(results)
		if got := m.Header.Get(bus.HeaderFlowID); got != m.Header.Get(bus.HeaderJobID) {
			t.Fatalf("Flow-Id %q became %q; want the job's own id %s", flow, got, m.Header.Get(bus.HeaderJobID))
		}
	}
}
