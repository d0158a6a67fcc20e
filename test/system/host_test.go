package system_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

const helloPy = `# sandbox
def main(name: str, greeting: str = "Hello"):
    print(f"greeting {name}")
    return {"greeting": f"{greeting}, {name}!"}
`

const step1Py = `# sandbox
# next: agent.run.step2
def main(n: int):
    return {"n": n + 1}
`

const step2Sh = `# sandbox
cat >/dev/null
echo "{\"n\": $((ARG_N * 10))}"
`

func TestCallReturnsResultWithHeaders(t *testing.T) {
	h := hosttest.New(t, map[string]string{"hello.py": helloPy})
	results := h.Sub("agent.result.hello")
	reply := h.Call("hello", `{"name":"Ada"}`)
	if got := string(reply.Data); got != `{"greeting":"Hello, Ada!"}` {
		t.Fatalf("reply = %s", got)
	}
	id := reply.Header.Get(bus.HeaderJobID)
	if id == "" || reply.Header.Get(bus.HeaderFlowID) != id || reply.Header.Get(bus.HeaderJobStatus) != "succeeded" {
		t.Fatalf("reply headers = %v", reply.Header)
	}
	ev := h.Next(results)
	if ev.Header.Get(bus.HeaderJobID) != id || ev.Header.Get(bus.HeaderFlowID) != id || string(ev.Data) != string(reply.Data) {
		t.Fatalf("result event = %v %s", ev.Header, ev.Data)
	}
	rec := h.Record(id)
	if rec.Status != jobtype.Succeeded || rec.Function != "hello" || rec.Attempts != 1 || rec.ExitCode == nil || *rec.ExitCode != 0 ||
		rec.FlowID != id || string(rec.Result) != `{"greeting":"Hello, Ada!"}` || rec.Started.IsZero() || rec.Finished.Before(rec.Started) {
		t.Fatalf("record = %+v", rec)
	}
}

func TestChainCarriesFlowID(t *testing.T) {
	h := hosttest.New(t, map[string]string{"step1.py": step1Py, "step2.sh": step2Sh})
	results := h.Sub("agent.result.>")
	h.Publish("agent.run.step1", `{"n":1}`, map[string]string{bus.HeaderMsgID: "chain-1"})
	got := map[string]*nats.Msg{}
	for len(got) < 2 {
		m := h.Next(results)
		got[m.Subject] = m
	}
	s1, s2 := got["agent.result.step1"], got["agent.result.step2"]
	if string(s1.Data) != `{"n":2}` || string(s2.Data) != `{"n":20}` {
		t.Fatalf("results: %s, %s", s1.Data, s2.Data)
	}
	if s1.Header.Get(bus.HeaderJobID) != "chain-1" || s1.Header.Get(bus.HeaderFlowID) != "chain-1" {
		t.Fatalf("step1 headers: %v", s1.Header)
	}
	if s2.Header.Get(bus.HeaderFlowID) != "chain-1" || s2.Header.Get(bus.HeaderJobID) == "chain-1" {
		t.Fatalf("step2 headers: %v", s2.Header)
	}
	rec := h.Record(s2.Header.Get(bus.HeaderJobID))
	if rec.ParentJob != "chain-1" || rec.FlowID != "chain-1" {
		t.Fatalf("step2 record: %+v", rec)
	}
}

// A message id is the job id: publishing the same one twice runs the job once.
func TestDuplicateMessageIDRunsOnce(t *testing.T) {
	h := hosttest.New(t, map[string]string{"hello.py": helloPy})
	results := h.Sub("agent.result.hello")
	for range 2 {
		h.Publish("agent.run.hello", `{"name":"Once"}`, map[string]string{bus.HeaderMsgID: "same-id"})
	}
	h.Next(results)
	// A third, distinct message acts as a barrier: once its result is in, a duplicate run of
	// the first would have been delivered before it (one function, delivered in order).
	h.Publish("agent.run.hello", `{"name":"Barrier"}`, map[string]string{bus.HeaderMsgID: "barrier"})
	m := h.Next(results)
	if m.Header.Get(bus.HeaderJobID) != "barrier" {
		t.Fatalf("the duplicate ran again: got %s %s", m.Header.Get(bus.HeaderJobID), m.Data)
	}
}

func TestBadInputFailsClearlyAndIsNotRedelivered(t *testing.T) {
	h := hosttest.New(t, map[string]string{
		"hello.py": helloPy,
		"boom.sh":  "# sandbox\necho 'about to fail' >&2\nexit 3\n",
		"plain.sh": "# sandbox\necho 'just text, not json'\n",
		"huge.py":  "# sandbox\ndef main():\n    return 'x' * (2 << 20)\n",
	})
	cases := []struct {
		name, fn, payload string
		wantErr           string
		wantExit          *int
	}{
		{"malformed JSON", "hello", `{"name":`, "not valid JSON", nil},
		{"array payload", "hello", `[1,2]`, "must be a JSON object", nil},
		{"string payload", "hello", `"Ada"`, "must be a JSON object", nil},
		{"missing required argument", "hello", `{"greeting":"Hi"}`, `missing required argument "name"`, intp(2)},
		{"script exits non-zero", "boom", ``, "exited with code 3", intp(3)},
		{"result over max payload", "huge", `{}`, "more than the", intp(0)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			errs := h.Sub("agent.error." + c.fn)
			reply := h.Call(c.fn, c.payload)
			if reply.Header.Get(bus.HeaderJobStatus) != "failed" {
				t.Fatalf("reply %s: %s", reply.Header, reply.Data)
			}
			ev := hosttest.Decode[jobs.ErrorEvent](t, h.Next(errs).Data)
			if !strings.Contains(ev.Error, c.wantErr) {
				t.Fatalf("error = %q, want it to mention %q", ev.Error, c.wantErr)
			}
			if ev.Attempts != 1 || ev.Function != c.fn || ev.JobID != reply.Header.Get(bus.HeaderJobID) {
				t.Fatalf("event = %+v", ev)
			}
			if (c.wantExit == nil) != (ev.ExitCode == nil) || (c.wantExit != nil && *c.wantExit != *ev.ExitCode) {
				t.Fatalf("exit code = %v, want %v", ev.ExitCode, c.wantExit)
			}
			if c.fn == "boom" && !strings.Contains(ev.StderrTail, "about to fail") {
				t.Fatalf("stderr tail = %q", ev.StderrTail)
			}
			if rec := h.Record(ev.JobID); rec.Status != jobtype.Failed || rec.Attempts != 1 {
				t.Fatalf("record = %+v", rec)
			}
		})
	}
	// Terminated messages are gone from the consumers: nothing waits for redelivery.
	ctx := context.Background()
	js, _ := jetstream.New(h.NC)
	for _, fn := range []string{"hello", "boom", "huge"} {
		c, err := js.Consumer(ctx, bus.RunStream, bus.ConsumerName(fn))
		if err != nil {
			t.Fatal(err)
		}
		// The reply goes out just before the message is terminated: wait for the server to
		// have the termination, then nothing may be pending or redelivered.
		var info *jetstream.ConsumerInfo
		h.Eventually(fn+" consumer settled", func() bool {
			info, err = c.Info(ctx)
			return err == nil && info.NumAckPending == 0 && info.NumPending == 0
		})
		if info.NumRedelivered != 0 {
			t.Fatalf("%s consumer redelivered work: %+v", fn, info)
		}
	}

	t.Run("non-JSON last line is a string result", func(t *testing.T) {
		if got := string(h.Call("plain", "").Data); got != `"just text, not json"` {
			t.Fatalf("result = %s", got)
		}
	})
}

func intp(i int) *int { return &i }

func TestUnknownFunction(t *testing.T) {
	h := hosttest.New(t, map[string]string{"hello.py": helloPy})
	reply := h.Call("nosuch", `{}`)
	if reply.Header.Get(bus.HeaderJobStatus) != "failed" || !strings.Contains(string(reply.Data), `no function named \"nosuch\"`) {
		t.Fatalf("reply: %v %s", reply.Header, reply.Data)
	}
	errs := h.Sub("agent.error.nosuch")
	h.Publish("agent.run.nosuch", `{}`, map[string]string{bus.HeaderMsgID: "lost-1"})
	ev := hosttest.Decode[jobs.ErrorEvent](t, h.Next(errs).Data)
	if ev.JobID != "lost-1" || !strings.Contains(ev.Error, "no function named") {
		t.Fatalf("event = %+v", ev)
	}
}

func TestRetriesThenFails(t *testing.T) {
	h := hosttest.New(t, map[string]string{
		"flaky.sh": "# sandbox\n# retries: 1\necho attempt >&2\nexit 1\n",
	})
	errs := h.Sub("agent.error.flaky")
	reply := h.Call("flaky", `{}`)
	ev := hosttest.Decode[jobs.ErrorEvent](t, h.Next(errs).Data)
	if ev.Attempts != 2 || reply.Header.Get(bus.HeaderJobStatus) != "failed" {
		t.Fatalf("event = %+v, reply = %s", ev, reply.Data)
	}
}

func TestTimeoutKillsTheProcessTree(t *testing.T) {
	// A duration of this test's own: processes of other tests (or packages run beside this
	// one) must not be taken for leftovers of this job.
	sleep := fmt.Sprintf("sleep 300.%d", time.Now().UnixNano()%1_000_000)
	h := hosttest.New(t, map[string]string{
		"slow.sh": "# sandbox\n# timeout: 1s\nsetsid " + sleep + " &\nnohup " + sleep + " >/dev/null 2>&1 &\n" + sleep + "\n",
	})
	reply := h.Call("slow", `{}`)
	ev := hosttest.Decode[jobs.ErrorEvent](t, reply.Data)
	if !strings.Contains(ev.Error, "timeout") || !strings.Contains(ev.Error, "1s") {
		t.Fatalf("error = %q", ev.Error)
	}
	h.Eventually("no "+sleep+" left on the host", func() bool { return !processRunning(sleep) })
}

// processRunning looks for a process whose command line is cmdline.
func processRunning(cmdline string) bool {
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err == nil && strings.TrimRight(strings.ReplaceAll(string(b), "\x00", " "), " ") == cmdline {
			return true
		}
	}
	return false
}

func TestJailAndEnvironment(t *testing.T) {
	t.Setenv("HOST_SECRET_FOR_TEST", "leaked")
	h := hosttest.New(t, map[string]string{
		"inside.sh": `# sandbox
# env: GREETING=hi there
printf '{"uid":%s,"cwd":"%s","home":"%s","secret":"%s","greeting":"%s","pid":%s}\n' "$(id -u)" "$PWD" "$HOME" "$HOST_SECRET_FOR_TEST" "$GREETING" "$$"
`,
		"outside.sh": `# no sandbox: runs on the host in its own directory
printf '{"cwd":"%s","secret":"%s"}\n' "$PWD" "$HOST_SECRET_FOR_TEST"
`,
	})
	in := hosttest.Decode[map[string]any](t, h.Call("inside", "").Data)
	if in["uid"] == float64(0) || in["cwd"] != "/job" || in["home"] != "/job" || in["secret"] != "" || in["greeting"] != "hi there" || in["pid"] == float64(os.Getpid()) {
		t.Fatalf("inside the jail: %v", in)
	}
	out := hosttest.Decode[map[string]any](t, h.Call("outside", "").Data)
	cwd, _ := out["cwd"].(string)
	if out["secret"] != "" || !strings.HasPrefix(cwd, filepath.Join(h.Dir, "data", "run")) {
		t.Fatalf("unjailed: %v", out)
	}
}

func TestLogsAreStreamedAndKept(t *testing.T) {
	h := hosttest.New(t, map[string]string{"hello.py": helloPy})
	logs := h.Sub("agent.logs.hello.*")
	reply := h.Call("hello", `{"name":"Log"}`)
	id := reply.Header.Get(bus.HeaderJobID)
	m := h.Next(logs)
	if m.Subject != "agent.logs.hello."+id || string(m.Data) != "greeting Log" || m.Header.Get(bus.HeaderStream) != "stdout" || m.Header.Get(bus.HeaderJobID) != id {
		t.Fatalf("log line: %s %v %q", m.Subject, m.Header, m.Data)
	}
}

func TestBadAnnotationRefusesOnlyThatFunction(t *testing.T) {
	h := hosttest.New(t, map[string]string{
		"hello.py": helloPy,
		"typo.py":  "# sandbox\n# volum: x .x\ndef main():\n    return 1\n",
	})
	if got := string(h.Call("hello", `{"name":"Ada"}`).Data); got != `{"greeting":"Hello, Ada!"}` {
		t.Fatalf("hello: %s", got)
	}
	if reply := h.Call("typo", `{}`); !strings.Contains(string(reply.Data), "no function named") {
		t.Fatalf("typo was served: %s", reply.Data)
	}
}

func TestHotReload(t *testing.T) {
	h := hosttest.New(t, map[string]string{"hello.py": helloPy})
	served := func(name, payload, want string) func() bool {
		return func() bool { return string(h.Call(name, payload).Data) == want }
	}
	// Added.
	h.Write("added.sh", "# sandbox\necho '\"v1\"'\n")
	h.Eventually("added function served", served("added", "", `"v1"`))
	// Edited while a run of the old version is in flight: that run finishes on the old code.
	h.Write("slowv.sh", "# sandbox\nread -r _\nsleep 1\necho '\"old\"'\n")
	h.Eventually("slow function served", func() bool {
		return !strings.Contains(string(h.Call("slowv", "{}").Data), "no function named")
	})
	inflight := make(chan string, 1)
	go func() {
		m := nats.NewMsg(bus.CallSubject("slowv"))
		m.Data = []byte("{}")
		reply, err := h.NC.RequestMsg(m, time.Minute)
		if err != nil {
			inflight <- err.Error()
			return
		}
		inflight <- string(reply.Data)
	}()
	h.Eventually("the slow run started", func() bool {
		recs, _ := h.Store.List(context.Background(), func(r *jobs.Record) bool { return r.Function == "slowv" && r.Status == jobtype.Running })
		return len(recs) > 0
	})
	h.Write("slowv.sh", "# sandbox\necho '\"new\"'\n")
	if got := <-inflight; got != `"old"` {
		t.Fatalf("in-flight run during edit returned %s", got)
	}
	h.Eventually("edited function served", served("slowv", "{}", `"new"`))
	// Deleted.
	if err := os.Remove(filepath.Join(h.FnDir, "added.sh")); err != nil {
		t.Fatal(err)
	}
	// A call accepted just before the reload took the function away stays queued in its
	// consumer (a function may come back; its triggers are durable) and gets no answer: such a
	// call times out here and the next one is asked.
	h.Eventually("deleted function gone", func() bool {
		reply, err := h.NC.Request(bus.CallSubject("added"), nil, 2*time.Second)
		return err == nil && strings.Contains(string(reply.Data), "no function named")
	})
}

func TestDrainFinishesRunningJobs(t *testing.T) {
	h := hosttest.New(t, map[string]string{"wait.sh": "# sandbox\nsleep 1\necho '\"done\"'\n"})
	results := h.Sub("agent.result.wait")
	h.Publish("agent.run.wait", "", map[string]string{bus.HeaderMsgID: "drain-1"})
	h.Eventually("the run started", func() bool {
		r, err := h.Store.Get(context.Background(), "drain-1")
		return err == nil && r.Status == jobtype.Running
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.Host.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// Shutdown returned, so the job has settled: its record is final already, and its result
	// was published (this connection may receive it a moment later).
	if r, err := h.Store.Get(context.Background(), "drain-1"); err != nil || r.Status != jobtype.Succeeded {
		t.Fatalf("the running job did not finish before shutdown returned: %+v %v", r, err)
	}
	if m := h.Next(results); string(m.Data) != `"done"` {
		t.Fatalf("result = %s", m.Data)
	}
}

func TestConcurrentCalls(t *testing.T) {
	h := hosttest.New(t, map[string]string{"hello.py": helloPy})
	const n = 20
	replies := make(chan string, n)
	for i := range n {
		go func() {
			m := nats.NewMsg(bus.CallSubject("hello"))
			m.Data = []byte(fmt.Sprintf(`{"name":"n%d"}`, i))
			r, err := h.NC.RequestMsg(m, time.Minute)
			if err != nil {
				replies <- err.Error()
				return
			}
			replies <- string(r.Data)
		}()
	}
	seen := map[string]bool{}
	for range n {
		seen[<-replies] = true
	}
	for i := range n {
		if want := fmt.Sprintf(`{"greeting":"Hello, n%d!"}`, i); !seen[want] {
			t.Fatalf("missing %s in %v", want, seen)
		}
	}
}
