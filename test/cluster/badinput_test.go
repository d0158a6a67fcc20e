package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// TestOversizedMessages runs against a NATS whose max_payload is 128 KiB: a trigger under it
// flows through; a result or a next-step message that cannot fit fails at once with an error
// naming the limit (not redelivered, the host serving on); a trigger over it is refused to the
// publisher; a call over it gets an answer rather than silence.
func TestOversizedMessages(t *testing.T) {
	t.Parallel()
	const maxPayload = 128 << 10
	dir := tempDir(t, "big-nats-")
	natsd := startNATS(t, dir, maxPayload)
	e := newEnv(t, natsd.url())
	e.fn("echo.sh", "# sandbox\n# next: agent.run.sink\ncat\n")
	e.fn("sink.sh", "# sandbox\ncat >/dev/null\necho '\"ok\"'\n")
	e.fn("big.sh", "# sandbox\nhead -c 200000 /dev/zero | tr '\\0' a | sed 's/.*/\"&\"/'\n")
	e.fn("fails.sh", "# sandbox\necho 'this input is not for me' >&2\nexit 3\n")
	h := e.host(hostOpts{name: "big-a"})
	results := e.watch("echo", "sink", "big")
	errs := map[string]chan *nats.Msg{}
	for _, fn := range []string{"echo", "big", "fails"} {
		ch := make(chan *nats.Msg, 8)
		sub, err := e.nc.ChanSubscribe(bus.ErrorSubject(fn), ch)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sub.Unsubscribe() })
		errs[fn] = ch
	}
	payload := func(n int) []byte { return fmt.Appendf(nil, `{"s":%q}`, strings.Repeat("a", n)) }
	nextError := func(fn string) jobs.ErrorEvent {
		t.Helper()
		select {
		case m := <-errs[fn]:
			var ev jobs.ErrorEvent
			if err := json.Unmarshal(m.Data, &ev); err != nil {
				t.Fatal(err)
			}
			return ev
		case <-time.After(60 * time.Second):
			t.Fatalf("no error event for %s", fn)
			return jobs.ErrorEvent{}
		}
	}

	// Under the limit, with room for the host's headers: the flow goes through.
	if err := e.publish("agent.run.echo", "big-ok", payload(120_000)); err != nil {
		t.Fatal(err)
	}
	if !natstest.Poll(60*time.Second, func() bool { return results.flowsDone("sink") == 1 }) {
		t.Fatalf("a 120 kB trigger did not flow through; errors %v", results.errorEvents())
	}

	// Fits as a trigger, but its result (the same bytes) leaves no room for the host's headers.
	if err := e.publish("agent.run.echo", "big-result", payload(127_000)); err != nil {
		t.Fatal(err)
	}
	ev := nextError("echo")
	t.Logf("a 127 kB result: %q (attempts %d)", ev.Error, ev.Attempts)
	if ev.JobID != "big-result" || ev.Attempts != 1 || !strings.Contains(ev.Error, "bytes") || !strings.Contains(ev.Error, "NATS") {
		t.Errorf("error event for an oversized result: %+v", ev)
	}

	// A bash result line far over the limit.
	if err := e.publish("agent.run.big", "big-line", nil); err != nil {
		t.Fatal(err)
	}
	ev = nextError("big")
	t.Logf("a 200 kB result line: %q (attempts %d)", ev.Error, ev.Attempts)
	if ev.Attempts != 1 || !strings.Contains(ev.Error, "bytes") {
		t.Errorf("error event for an oversized result line: %+v", ev)
	}
	for _, fn := range []string{"echo", "big"} {
		if !natstest.Poll(60*time.Second, func() bool { ok, _ := e.consumerSettled(fn); return ok }) {
			_, info := e.consumerSettled(fn)
			t.Errorf("an oversized result was not settled for good: %s", info)
		}
	}

	// Over the limit: the publisher is told, nothing is accepted.
	_, err := e.js.Publish(e.ctx(10*time.Second), "agent.run.echo", payload(140_000))
	t.Logf("publishing a 140 kB trigger: %v", err)
	if err == nil {
		t.Error("a trigger over max_payload was accepted")
	}

	// A job that fails on a trigger close to the limit must still reach its final error: its
	// error event, its dead letter (the trigger plus the host's headers), a settled message.
	if err := e.publish("agent.run.fails", "big-fails", payload(maxPayload-200)); err != nil {
		t.Fatal(err)
	}
	ev = nextError("fails")
	t.Logf("a failing job on a %d-byte trigger: %q (attempts %d)", maxPayload-200, ev.Error, ev.Attempts)
	settled := natstest.Poll(60*time.Second, func() bool { ok, _ := e.consumerSettled("fails"); return ok })
	rec, _ := e.store().Get(e.ctx(10*time.Second), "big-fails")
	if !settled || rec == nil || rec.Status != jobtype.Failed {
		_, info := e.consumerSettled("fails")
		t.Errorf("BUG: a job that failed on a trigger near max_payload never reaches its final error (record %+v; %s): "+
			"its dead letter cannot be written, so it is handed back and run again, forever; host log:\n%s", rec, info,
			grepLines(h.logText(), "dead letter", 3))
	}

	// A call whose body fits, but whose job's result does not: the caller must get an answer.
	m := nats.NewMsg(bus.CallSubject("echo"))
	m.Data = payload(maxPayload - 300)
	// The call runs a jailed job: the bound is a safety net for a loaded machine.
	reply, err := e.nc.RequestMsgWithContext(e.ctx(60*time.Second), m)
	if err != nil {
		t.Errorf("BUG: a call just under max_payload got no answer within 60 s: %v", err)
	} else {
		t.Logf("a call just under max_payload: %s %s", reply.Header.Get("Job-Status"), reply.Data)
		if reply.Header.Get("Job-Status") != "failed" {
			t.Errorf("a call whose result cannot fit: %s", reply.Data)
		}
	}
}

// grepLines returns up to n lines of text that contain s.
func grepLines(text, s string, n int) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) && len(out) < n {
			if len(l) > 400 {
				l = l[:400] + "…"
			}
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestConsumerOrStreamDeletedByHand deletes, under a running host, first its function's
// consumer and then, twenty times over, the whole trigger stream: each time the host says so
// in its log, recreates them, and serves new triggers.
func TestConsumerOrStreamDeletedByHand(t *testing.T) {
	// A safety net for a loaded machine, not the time anything should take: every wait below
	// ends as soon as what it waits for has happened.
	const recreateBound = 2 * time.Minute
	dir := tempDir(t, "deleted-nats-")
	natsd := startNATS(t, dir, 0)
	e := newEnv(t, natsd.url())
	e.fn("echo.sh", "# sandbox\ncat\n")
	h := e.host(hostOpts{name: "deleted-a"})
	results := e.watch("echo")
	const logLine = "consumer or stream vanished; recreating it"
	served := 0
	serves := func(id string) {
		t.Helper()
		m := nats.NewMsg("agent.run.echo")
		m.Data = []byte(`{"id":"` + id + `"}`)
		m.Header.Set(bus.HeaderMsgID, id)
		var err error
		natstest.Poll(recreateBound, func() bool {
			_, err = e.js.PublishMsg(e.ctx(5*time.Second), m)
			return err == nil
		})
		if err != nil {
			t.Fatalf("BUG: after the host recreated the deleted stream, it accepts no trigger (%v); nats-server says:\n%s",
				err, grepLines(natsd.logText(), "AGENT_RUN", 3))
		}
		served++
		if !natstest.Poll(recreateBound, func() bool { return results.flowsDone("echo") == served }) {
			t.Fatalf("trigger %s was not served within %s", id, recreateBound)
		}
	}
	serves("before")

	stream, err := e.js.Stream(e.ctx(10*time.Second), bus.RunStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.DeleteConsumer(e.ctx(10*time.Second), bus.ConsumerName("echo")); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	// The consumer existing again is the host's own sign that it saw the deletion: the delete
	// above returned, and only the host's fetch loops recreate it, after logging why. The bound
	// is a safety net for a loaded machine, not the time this should take.
	if !natstest.Poll(recreateBound, func() bool {
		_, err := stream.Consumer(context.Background(), bus.ConsumerName("echo"))
		return err == nil
	}) {
		t.Fatalf("the consumer was not recreated within %s:\n%s", recreateBound, grepLines(h.logText(), "echo", 5))
	}
	line, ok := h.waitLog(0, logLine)
	if !ok {
		t.Fatalf("the consumer was recreated, but the host logged no %q before it:\n%s", logLine, grepLines(h.logText(), "echo", 5))
	}
	t.Logf("consumer deleted: recreated after %s; the host logged %s", time.Since(deleted).Round(time.Millisecond), line)
	serves("after-consumer")

	var took []time.Duration
	for round := range 20 {
		before := strings.Count(h.logText(), logLine)
		if err := e.js.DeleteStream(e.ctx(10*time.Second), bus.RunStream); err != nil {
			t.Fatal(err)
		}
		deleted = time.Now()
		// Wait for the recreation itself: the delete returned, so a stream with the function's
		// consumer in it is the one the host made after seeing both gone.
		if !natstest.Poll(recreateBound, func() bool {
			s, err := e.js.Stream(context.Background(), bus.RunStream)
			if err != nil {
				return false
			}
			_, err = s.Consumer(context.Background(), bus.ConsumerName("echo"))
			return err == nil
		}) {
			t.Fatalf("BUG: round %d: the host did not recreate the deleted stream within %s; its fetch loops "+
				"retry without recreating it:\n%s\n…\n%s\n…\n%s", round, recreateBound, grepLines(h.logText(), "create stream", 2),
				grepLines(h.logText(), "no responders", 2), grepLines(h.logText(), "fetching work failed", 3))
		}
		took = append(took, time.Since(deleted))
		// The host logs before it recreates, so the line is there by now.
		if strings.Count(h.logText(), logLine) <= before {
			t.Fatalf("round %d: the stream was recreated, but the host logged no %q about the deleted stream:\n%s",
				round, logLine, grepLines(h.logText(), "echo", 5))
		}
		serves(fmt.Sprintf("after-stream-%d", round))
	}
	t.Logf("stream deleted 20 times: recreated with its consumer within %v; every trigger after each deletion was served", took)
	if !h.healthy() {
		t.Error("the host is not healthy after the deletions")
	}
}

// TestDifferentCodeForOneName starts a second host with different code under a function name
// the first host already serves: the second host warns, naming both versions.
func TestDifferentCodeForOneName(t *testing.T) {
	for _, c := range []struct {
		name         string
		first, other string // hostnames; "" keeps the machine's
	}{
		{"hosts on two machines", "machine-1", "machine-2"},
		{"two hosts on one machine", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := tempDir(t, "versions-nats-")
			natsd := startNATS(t, dir, 0)
			e := newEnv(t, natsd.url())
			v1, v2 := filepath.Join(e.dir, "v1"), filepath.Join(e.dir, "v2")
			writeFile(t, filepath.Join(v1, "greet.sh"), "# sandbox\necho '\"hello\"'\n")
			writeFile(t, filepath.Join(v2, "greet.sh"), "# sandbox\necho '\"bonjour\"'\n")
			e.host(hostOpts{name: c.first, fnDir: v1})
			second := e.host(hostOpts{name: c.other, fnDir: v2})
			h1, h2 := version(t, v1, "greet"), version(t, v2, "greet")
			line, ok := second.waitLog(3*time.Second, "another host serves different code", h1, h2)
			t.Logf("versions %s and %s; warning: %s", h1, h2, line)
			if !ok {
				t.Errorf("BUG: no warning naming both versions (%s, %s) when a second host on the same machine serves different code for greet "+
					"(both hosts take the machine's hostname as their host id, so each takes the other for itself); the second host logged:\n%s",
					h1, h2, tail(second.logPath, 10))
			}
		})
	}
}

func version(t *testing.T, dir, name string) string {
	t.Helper()
	fns, errs := functions.Load(dir)
	if len(errs) > 0 || fns[name] == nil {
		t.Fatalf("load %s: %v", dir, errs)
	}
	return fns[name].Hash
}
