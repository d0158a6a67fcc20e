package host_test

// The engine's tests: how a job ends (ack, retry, dead letter, refusal, repeat, drain, cancel,
// reply), on a real embedded NATS with a fake runner in place of the jail. They run on any
// machine, bubblewrap or not.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/host"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// fakeRunner stands in for the jail: it answers each run with what its function's behaviour
// says, and remembers every run it was asked for.
type fakeRunner struct {
	mu    sync.Mutex
	runs  []fakeRun
	behav map[string]func(ctx context.Context, j *jobtype.Job) *jobtype.Outcome
	// tornDown, when set, says for a run what its handle's Destroy waits for (a jail still
	// being torn down after its answer); nil: nothing.
	tornDown func(function string, j *jobtype.Job) <-chan struct{}
}

type fakeRun struct {
	function string
	jobtype.Job
}

func newFake() *fakeRunner {
	return &fakeRunner{behav: map[string]func(context.Context, *jobtype.Job) *jobtype.Outcome{}}
}

func (f *fakeRunner) on(function string, b func(ctx context.Context, j *jobtype.Job) *jobtype.Outcome) *fakeRunner {
	f.behav[function] = b
	return f
}

func (f *fakeRunner) Start(ctx context.Context, fn *functions.Function, _ string, j *jobtype.Job) jobtype.Handle {
	f.mu.Lock()
	f.runs = append(f.runs, fakeRun{fn.Name, *j})
	b := f.behav[fn.Name]
	var teardown <-chan struct{}
	if f.tornDown != nil {
		teardown = f.tornDown(fn.Name, j)
	}
	f.mu.Unlock()
	return hosttest.Started(ctx, func(ctx context.Context) *jobtype.Outcome {
		if b == nil {
			return &jobtype.Outcome{ExitCode: 0, Result: []byte(`"ok"`)}
		}
		return b(ctx, j)
	}, teardown)
}

// attempts lists the attempt numbers of the runs of a job.
func (f *fakeRunner) attempts(jobID string) []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []int
	for _, r := range f.runs {
		if r.ID == jobID {
			out = append(out, r.Attempt)
		}
	}
	return out
}

func (f *fakeRunner) count(function string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.runs {
		if r.function == function {
			n++
		}
	}
	return n
}

func result(b string) func(context.Context, *jobtype.Job) *jobtype.Outcome {
	return func(context.Context, *jobtype.Job) *jobtype.Outcome { return &jobtype.Outcome{Result: []byte(b)} }
}

func failWith(err error, code int) func(context.Context, *jobtype.Job) *jobtype.Outcome {
	return func(context.Context, *jobtype.Job) *jobtype.Outcome {
		return &jobtype.Outcome{Err: err, ExitCode: code, StderrTail: "it went wrong\n"}
	}
}

// settled waits until a function's consumer holds no message: every delivery was acked or
// terminated, none is pending or waits for redelivery.
func settled(t *testing.T, h *hosttest.H, function string) {
	t.Helper()
	cons := consumer(t, h, function)
	natstest.Eventually(t, function+"'s messages are settled", func() bool {
		info, err := cons.Info(context.Background())
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0 && info.Delivered.Stream > 0
	})
}

func consumer(t *testing.T, h *hosttest.H, function string) jetstream.Consumer {
	t.Helper()
	js, err := jetstream.New(h.NC)
	if err != nil {
		t.Fatal(err)
	}
	c, err := js.Consumer(context.Background(), bus.RunStream, bus.ConsumerName(function))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A success publishes its result, answers the caller, records the job and acks the message.
func TestEngineSuccessIsAcked(t *testing.T) {
	fake := newFake().on("hello", result(`{"hi":"there"}`))
	h := hosttest.NewEngine(t, map[string]string{"hello.sh": "echo\n"}, fake)
	results := h.Sub(bus.ResultSubject("hello"))
	reply := h.Call("hello", `{"name":"x"}`)
	id := reply.Header.Get(bus.HeaderJobID)
	if reply.Header.Get(bus.HeaderJobStatus) != "succeeded" || string(reply.Data) != `{"hi":"there"}` || id == "" {
		t.Fatalf("reply %v %s", reply.Header, reply.Data)
	}
	if m := h.Next(results); string(m.Data) != `{"hi":"there"}` || m.Header.Get(bus.HeaderJobID) != id {
		t.Fatalf("result %v %s", m.Header, m.Data)
	}
	rec := h.Record(id)
	if rec.Status != jobtype.Succeeded || string(rec.Result) != `{"hi":"there"}` || rec.Attempts != 1 ||
		len(rec.Outputs) != 1 || rec.Outputs[0] != bus.ResultSubject("hello") {
		t.Fatalf("record %+v", rec)
	}
	settled(t, h, "hello")
	if got := fake.attempts(id); len(got) != 1 {
		t.Fatalf("runs of %s: %v", id, got)
	}
}

// A failed attempt of a function with retries is handed back with a backoff delay and runs
// again; the retry is recorded and logged with its delay, which follows the 1s, 2s … schedule.
func TestEngineRetryWithBackoff(t *testing.T) {
	fake := newFake().on("flaky", func(_ context.Context, j *jobtype.Job) *jobtype.Outcome {
		if j.Attempt == 1 {
			return &jobtype.Outcome{Err: errors.New("not yet"), ExitCode: 1}
		}
		return &jobtype.Outcome{Result: []byte(`"second time"`)}
	})
	h := hosttest.NewEngine(t, map[string]string{"flaky.sh": "# retries: 2\necho\n"}, fake)
	h.Publish(bus.RunSubject("flaky"), `{}`, map[string]string{bus.HeaderMsgID: "flaky-1"})
	rec := h.Record("flaky-1")
	if rec.Status != jobtype.Succeeded || rec.Attempts != 2 || string(rec.Result) != `"second time"` {
		t.Fatalf("record %+v", rec)
	}
	if got := fake.attempts("flaky-1"); len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("attempts %v", got)
	}
	retry := h.WaitLog("job failed; retrying", 0)
	in, ok := retry.ContextMap()["in"].(time.Duration)
	if !ok || in < 800*time.Millisecond || in > 1200*time.Millisecond {
		t.Fatalf("first retry delay %v (%T), want 1s ±20%%", retry.ContextMap()["in"], retry.ContextMap()["in"])
	}
	settled(t, h, "flaky")
}

// A job that fails for good leaves a dead letter and an error event, answers its caller with
// the error and is terminated: it does not run again.
func TestEngineDeadLetter(t *testing.T) {
	fake := newFake().on("fragile", failWith(&jobtype.TerminalError{Err: errors.New("bad input: no order")}, 4))
	h := hosttest.NewEngine(t, map[string]string{"fragile.sh": "# retries: 3\necho\n"}, fake)
	errs := h.Sub(bus.ErrorSubject("fragile"))
	m := nats.NewMsg(bus.CallSubject("fragile"))
	m.Header.Set(bus.HeaderMsgID, "order-7")
	m.Header.Set(bus.HeaderFlowID, "flow-7")
	reply := h.CallMsg(m, `{"order":7}`)
	body := hosttest.Decode[jobs.ErrorEvent](t, reply.Data)
	if reply.Header.Get(bus.HeaderJobStatus) != "failed" || body.JobID != "order-7" || body.FlowID != "flow-7" ||
		!strings.Contains(body.Error, "bad input") || body.StderrTail != "it went wrong\n" || body.ExitCode == nil || *body.ExitCode != 4 {
		t.Fatalf("reply %v %+v", reply.Header, body)
	}
	if ev := hosttest.Decode[jobs.ErrorEvent](t, h.Next(errs).Data); ev.JobID != "order-7" || ev.Attempts != 1 {
		t.Fatalf("error event %+v", ev)
	}
	c, err := client.New(context.Background(), h.NC)
	if err != nil {
		t.Fatal(err)
	}
	dl, err := c.DeadLetter(context.Background(), "order-7")
	if err != nil {
		t.Fatal(err)
	}
	if dl.Function != "fragile" || string(dl.Data) != `{"order":7}` || !strings.Contains(dl.Error, "bad input") || dl.Attempts != 1 ||
		dl.Header.Get(bus.HeaderFlowID) != "flow-7" || dl.Header.Get(bus.HeaderReplyTo) != "" {
		t.Fatalf("dead letter %+v", dl)
	}
	rec := h.Record("order-7")
	if rec.Status != jobtype.Failed || len(rec.Outputs) != 1 || rec.Outputs[0] != bus.ErrorSubject("fragile") {
		t.Fatalf("record %+v", rec)
	}
	settled(t, h, "fragile")
	if n := fake.count("fragile"); n != 1 {
		t.Fatalf("a terminal failure ran %d times", n)
	}
}

// A job that keeps failing runs 1 + retries times and then gives up with a dead letter.
func TestEngineRetriesRunOutIntoDeadLetter(t *testing.T) {
	fake := newFake().on("down", failWith(errors.New("upstream 503"), 1))
	h := hosttest.NewEngine(t, map[string]string{"down.sh": "# retries: 1\necho\n"}, fake)
	errs := h.Sub(bus.ErrorSubject("down"))
	h.Publish(bus.RunSubject("down"), `{}`, map[string]string{bus.HeaderMsgID: "down-1"})
	if ev := hosttest.Decode[jobs.ErrorEvent](t, h.Next(errs).Data); ev.Attempts != 2 || !strings.Contains(ev.Error, "upstream 503") {
		t.Fatalf("error event %+v", ev)
	}
	if rec := h.Record("down-1"); rec.Status != jobtype.Failed || rec.Attempts != 2 {
		t.Fatalf("record %+v", rec)
	}
	settled(t, h, "down")
	if got := fake.attempts("down-1"); len(got) != 2 {
		t.Fatalf("attempts %v", got)
	}
}

// A failure of what the job depends on (its volume store) is retried whatever the function's
// retries say.
func TestEngineUnavailableIsRetriedBeyondRetries(t *testing.T) {
	fake := newFake().on("vol", func(_ context.Context, j *jobtype.Job) *jobtype.Outcome {
		if j.Attempt == 1 {
			return &jobtype.Outcome{Err: &jobtype.UnavailableError{Err: errors.New("volume store down")}, ExitCode: -1}
		}
		return &jobtype.Outcome{Result: []byte(`"stored"`)}
	})
	h := hosttest.NewEngine(t, map[string]string{"vol.sh": "echo\n"}, fake)
	h.Publish(bus.RunSubject("vol"), `{}`, map[string]string{bus.HeaderMsgID: "vol-1"})
	if rec := h.Record("vol-1"); rec.Status != jobtype.Succeeded || rec.Attempts != 2 {
		t.Fatalf("record %+v", rec)
	}
}

// A trigger whose message id is another function's job id is refused without running; the
// record under that id stays the other function's.
func TestEngineTerminalRefusalOfForeignID(t *testing.T) {
	fake := newFake().on("victim", result(`"victim-only"`))
	h := hosttest.NewEngine(t, map[string]string{"victim.sh": "echo\n", "thief.sh": "echo\n"}, fake,
		func(c *host.Config) { c.Streams.Duplicates = time.Second })
	h.Publish(bus.RunSubject("victim"), `{}`, map[string]string{bus.HeaderMsgID: "shared"})
	if rec := h.Record("shared"); rec.Function != "victim" {
		t.Fatalf("record %+v", rec)
	}
	js, _ := jetstream.New(h.NC)
	// The stream drops the id while it remembers it; past that window the engine must refuse it.
	natstest.Eventually(t, "the stream takes the id again", func() bool {
		m := nats.NewMsg(bus.RunSubject("thief"))
		m.Header.Set(bus.HeaderMsgID, "shared")
		ack, err := js.PublishMsg(context.Background(), m)
		return err == nil && !ack.Duplicate
	})
	e := h.WaitLog("trigger refused: its message id names another function's job, or a job sent with other arguments", 0)
	if e.ContextMap()["owner"] != "victim" {
		t.Fatalf("refusal %v", e.ContextMap())
	}
	settled(t, h, "thief")
	if n := fake.count("thief"); n != 0 {
		t.Fatalf("thief ran %d times under victim's id", n)
	}
	if rec, err := h.Store.Get(context.Background(), "shared"); err != nil || rec.Function != "victim" || string(rec.Result) != `"victim-only"` {
		t.Fatalf("victim's record changed: %+v %v", rec, err)
	}
}

// A trigger repeated after the stream forgot its id is not run again: a call gets the recorded
// outcome as its reply, and the message is acked.
func TestEngineRepeatedTriggerIsAnsweredFromTheRecord(t *testing.T) {
	fake := newFake().on("once", result(`{"n":1}`))
	h := hosttest.NewEngine(t, map[string]string{"once.sh": "echo\n"}, fake,
		func(c *host.Config) { c.Streams.Duplicates = time.Second })
	h.Publish(bus.RunSubject("once"), `{}`, map[string]string{bus.HeaderMsgID: "once-1"})
	h.Record("once-1")
	var reply *nats.Msg
	natstest.Eventually(t, "a repeated call is answered from the record", func() bool {
		m := nats.NewMsg(bus.CallSubject("once"))
		m.Header.Set(bus.HeaderMsgID, "once-1")
		reply = h.CallMsg(m, `{}`)
		// While the stream remembers the id, the call is answered by the forwarder instead;
		// either way it must be the recorded result.
		if reply.Header.Get(bus.HeaderJobStatus) != "succeeded" || string(reply.Data) != `{"n":1}` {
			t.Fatalf("repeated call got %v %s", reply.Header, reply.Data)
		}
		return len(h.Logs.FilterMessage("trigger of a job that already ran; not running it again").All()) > 0
	})
	settled(t, h, "once")
	if n := fake.count("once"); n != 1 {
		t.Fatalf("ran %d times", n)
	}
}

// A host writes a job's record before reading it, unless the trigger says a record was queued
// (bus.HeaderQueued); either way the record decides: a finished job is not run again, and a
// queued one runs once.
func TestEngineRecordWriteOrReadFirst(t *testing.T) {
	cases := []struct {
		name   string
		id     string
		queued bool // a queued record exists before the trigger, as `host invoke` writes it
		hint   bool // the trigger carries Job-Queued
	}{
		{"queued record, no hint", "rq-1", true, false},
		{"queued record, hint", "rq-2", true, true},
		{"no record, hint", "rq-3", false, true},
		{"no record, no hint", "rq-4", false, false},
	}
	fake := newFake().on("rq", result(`"ran"`))
	h := hosttest.NewEngine(t, map[string]string{"rq.sh": "echo\n"}, fake,
		func(c *host.Config) { c.Streams.Duplicates = time.Second })
	js, _ := jetstream.New(h.NC)
	ran := 0
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.queued {
				if _, err := h.Store.Move(context.Background(), &jobs.Record{ID: c.id, Function: "rq", FlowID: c.id, Status: jobtype.Queued, Enqueued: time.Now()}, jobs.Version{}); err != nil {
					t.Fatal(err)
				}
			}
			hdr := map[string]string{bus.HeaderMsgID: c.id}
			if c.hint {
				hdr[bus.HeaderQueued] = "1"
			}
			h.Publish(bus.RunSubject("rq"), `{}`, hdr)
			if rec := h.Record(c.id); rec.Status != jobtype.Succeeded {
				t.Fatalf("record %+v", rec)
			}
			ran++
			settled(t, h, "rq")
			if n := fake.count("rq"); n != ran {
				t.Fatalf("ran %d times, want %d", n, ran)
			}

			// The same id again once the stream forgot it, without the hint: the finished
			// record stops it.
			logged := len(h.Logs.FilterMessage("trigger of a job that already ran; not running it again").All())
			natstest.Eventually(t, "the stream takes the id again", func() bool {
				m := nats.NewMsg(bus.RunSubject("rq"))
				m.Header.Set(bus.HeaderMsgID, c.id)
				ack, err := js.PublishMsg(context.Background(), m)
				return err == nil && !ack.Duplicate
			})
			h.WaitLog("trigger of a job that already ran; not running it again", logged)
			settled(t, h, "rq")
			if n := fake.count("rq"); n != ran {
				t.Fatalf("a finished job ran again: %d runs, want %d", n, ran)
			}
		})
	}
}

// On a drain the host lets running jobs finish before it stops.
func TestEngineDrainLetsRunsFinish(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	fake := newFake().on("slow", func(context.Context, *jobtype.Job) *jobtype.Outcome {
		close(started)
		<-release
		return &jobtype.Outcome{Result: []byte(`"done"`)}
	})
	h := hosttest.NewEngine(t, map[string]string{"slow.sh": "echo\n"}, fake)
	h.Publish(bus.RunSubject("slow"), `{}`, map[string]string{bus.HeaderMsgID: "slow-1"})
	<-started
	stopped := make(chan error)
	go func() { stopped <- h.Host.Shutdown(context.Background()) }()
	h.Eventually("the host stops taking work", func() bool { return !h.Host.Ready() })
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if rec, err := h.Store.Get(context.Background(), "slow-1"); err != nil || rec.Status != jobtype.Succeeded {
		t.Fatalf("after the drain: %+v %v", rec, err)
	}
}

// A job still running at the drain deadline is stopped and handed back at once, for another
// host: recorded as retrying, its message waiting for redelivery.
func TestEngineDrainDeadlineHandsBack(t *testing.T) {
	started := make(chan struct{})
	fake := newFake().on("stuck", func(ctx context.Context, _ *jobtype.Job) *jobtype.Outcome {
		close(started)
		<-ctx.Done()
		return &jobtype.Outcome{Err: fmt.Errorf("the run was stopped before it finished: %w", context.Cause(ctx)), ExitCode: -1}
	})
	h := hosttest.NewEngine(t, map[string]string{"stuck.sh": "echo\n"}, fake)
	h.Publish(bus.RunSubject("stuck"), `{}`, map[string]string{bus.HeaderMsgID: "stuck-1"})
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the deadline has passed already
	if err := h.Host.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	rec, err := h.Store.Get(context.Background(), "stuck-1")
	if err != nil || rec.Status != jobtype.Retrying || !strings.Contains(rec.Error, "handed back") {
		t.Fatalf("record %+v %v", rec, err)
	}
	// Another host taking from the consumer gets the message at once, as its second delivery.
	batch, err := consumer(t, h, "stuck").Fetch(1, jetstream.FetchMaxWait(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	m, ok := <-batch.Messages()
	if !ok {
		t.Fatalf("the handed-back message was not delivered again: %v", batch.Error())
	}
	if meta, err := m.Metadata(); err != nil || meta.NumDelivered != 2 || m.Headers().Get(bus.HeaderMsgID) != "stuck-1" {
		t.Fatalf("redelivered %v %+v %v", m.Headers(), meta, err)
	}
}

// A running job stopped on purpose (as a cancel command will) is canceled: its run's context
// ends with the cause, and the job is terminated, recorded as canceled and not retried.
func TestEngineStopJobCancels(t *testing.T) {
	started := make(chan string, 1)
	fake := newFake().on("long", func(ctx context.Context, j *jobtype.Job) *jobtype.Outcome {
		started <- j.ID
		<-ctx.Done()
		return &jobtype.Outcome{Err: fmt.Errorf("the run was stopped before it finished: %w", context.Cause(ctx)), ExitCode: -1}
	})
	h := hosttest.NewEngine(t, map[string]string{"long.sh": "# retries: 3\necho\n"}, fake)
	h.Publish(bus.RunSubject("long"), `{}`, map[string]string{bus.HeaderMsgID: "long-1"})
	if id := <-started; !h.Host.StopJob(id, errors.New("canceled by ada")) {
		t.Fatalf("job %s was not running", id)
	}
	if rec := h.Record("long-1"); rec.Status != jobtype.Canceled || !strings.Contains(rec.Error, "canceled by ada") {
		t.Fatalf("record %+v", rec)
	}
	settled(t, h, "long")
	if got := fake.attempts("long-1"); len(got) != 1 {
		t.Fatalf("a canceled job ran again: attempts %v", got)
	}
	if h.Host.StopJob("long-1", errors.New("again")) {
		t.Fatal("a job that ended is still stoppable")
	}
}

// A run stopped on purpose (its context canceled while the host is not draining) is canceled:
// terminated, recorded as such, its caller told, and not retried despite its retries.
func TestEngineCanceledIsNotRetried(t *testing.T) {
	fake := newFake().on("stopme", failWith(fmt.Errorf("the run was stopped before it finished: %w", context.Canceled), -1))
	h := hosttest.NewEngine(t, map[string]string{"stopme.sh": "# retries: 3\necho\n"}, fake)
	reply := h.Call("stopme", `{}`)
	id := reply.Header.Get(bus.HeaderJobID)
	if reply.Header.Get(bus.HeaderJobStatus) != "failed" || !strings.Contains(hosttest.Decode[jobs.ErrorEvent](t, reply.Data).Error, "stopped") {
		t.Fatalf("reply %v %s", reply.Header, reply.Data)
	}
	if rec := h.Record(id); rec.Status != jobtype.Canceled {
		t.Fatalf("record %+v", rec)
	}
	settled(t, h, "stopme")
	if got := fake.attempts(id); len(got) != 1 {
		t.Fatalf("a canceled job ran again: attempts %v", got)
	}
}

// A flow past --max-hops is stopped without running: the first step past it fails with an
// error event (so the loop shows), later ones are stopped quietly.
func TestEngineRunawayFlowStops(t *testing.T) {
	fake := newFake()
	h := hosttest.NewEngine(t, map[string]string{"loop.sh": "echo\n"}, fake, func(c *host.Config) { c.MaxHops = 2 })
	errs := h.Sub(bus.ErrorSubject("loop"))
	h.Publish(bus.RunSubject("loop"), `{}`, map[string]string{bus.HeaderMsgID: "hop-3", bus.HeaderHop: "3"})
	if ev := hosttest.Decode[jobs.ErrorEvent](t, h.Next(errs).Data); ev.JobID != "hop-3" || !strings.Contains(ev.Error, "--max-hops 2") {
		t.Fatalf("error event %+v", ev)
	}
	h.Publish(bus.RunSubject("loop"), `{}`, map[string]string{bus.HeaderMsgID: "hop-4", bus.HeaderHop: "4"})
	if rec := h.Record("hop-4"); rec.Status != jobtype.Failed || !strings.Contains(rec.Error, "--max-hops") || len(rec.Outputs) != 0 {
		t.Fatalf("record %+v", rec)
	}
	if e := h.WaitLog("runaway flow stopped", 0); e.ContextMap()["hop"] != int64(4) {
		t.Fatalf("log %v", e.ContextMap())
	}
	settled(t, h, "loop")
	if n := fake.count("loop"); n != 0 {
		t.Fatalf("a runaway step ran %d times", n)
	}
}

// A success with next: steps triggers each, with message ids fixed by the job so that a rerun
// cannot start them twice, and the job as their parent.
func TestEngineNextStepsCarryTheFlow(t *testing.T) {
	fake := newFake().on("first", result(`{"step":1}`))
	h := hosttest.NewEngine(t, map[string]string{"first.sh": "# next: agent.run.second\necho\n", "second.sh": "echo\n"}, fake)
	h.Publish(bus.RunSubject("first"), `{}`, map[string]string{bus.HeaderMsgID: "flow-a"})
	recs := func() []*jobs.Record {
		all, _ := h.Store.List(context.Background(), func(r *jobs.Record) bool { return r.Function == "second" && r.Status.Final() })
		return all
	}
	h.Eventually("the next step ran", func() bool { return len(recs()) == 1 })
	second := recs()[0]
	if second.FlowID != "flow-a" || second.ParentJob != "flow-a" || second.Hop != 1 || second.Status != jobtype.Succeeded {
		t.Fatalf("second step %+v", second)
	}
}

// A Reply-To that no host signed is ignored: the job runs, and the result goes only to its
// own outputs.
func TestEngineIgnoresUnsignedReplyTo(t *testing.T) {
	fake := newFake().on("echo", result(`"secret result"`))
	h := hosttest.NewEngine(t, map[string]string{"echo.sh": "echo\n"}, fake)
	stolen := h.Sub("thief.inbox")
	h.Publish(bus.RunSubject("echo"), `{}`, map[string]string{bus.HeaderMsgID: "echo-1", bus.HeaderReplyTo: "thief.inbox"})
	if rec := h.Record("echo-1"); rec.Status != jobtype.Succeeded {
		t.Fatalf("record %+v", rec)
	}
	h.WaitLog("ignored a Reply-To header that no host signed; the job runs, its result goes only to its own outputs", 0)
	select {
	case m := <-stolen:
		t.Fatalf("the result went to an unsigned Reply-To: %s", m.Data)
	default:
	}
}

// A function the host could not serve (its consumer could not be made) is served as soon as it
// can be, without anyone touching its file.
func TestEngineUnservedFunctionIsRetried(t *testing.T) {
	fake := newFake().on("late", result(`"served at last"`))
	h := hosttest.NewEngine(t, map[string]string{"first.sh": "echo\n"}, fake)
	js, err := jetstream.New(h.NC)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// A consumer of late's name that the host cannot update (a deliver policy is fixed at
	// creation) stands in for a NATS that refuses or times out.
	if _, err := js.CreateConsumer(ctx, bus.RunStream, jetstream.ConsumerConfig{
		Durable: bus.ConsumerName("late"), FilterSubjects: []string{bus.RunSubject("late")},
		AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy,
	}); err != nil {
		t.Fatal(err)
	}
	h.Write("late.sh", "echo\n")
	failed := h.WaitLog("cannot serve function; the host tries again shortly (is NATS reachable, and the data directory writable?)", 0)
	if failed.ContextMap()["function"] != "late" {
		t.Fatalf("refusal %v", failed.ContextMap())
	}
	retries := len(h.Logs.FilterMessage("functions not served yet; trying again").All())
	h.WaitLog("functions not served yet; trying again", retries)
	if err := js.DeleteConsumer(ctx, bus.RunStream, bus.ConsumerName("late")); err != nil {
		t.Fatal(err)
	}
	h.Eventually("late is served", func() bool {
		for _, e := range h.Logs.FilterMessage("serving function").All() {
			if e.ContextMap()["function"] == "late" {
				return true
			}
		}
		return false
	})
	if got := string(h.Call("late", `{}`).Data); got != `"served at last"` {
		t.Fatalf("late: %s", got)
	}
}
