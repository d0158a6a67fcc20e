package host_test

// Canceling jobs (`host cancel`, client.Cancel): a running job is stopped by the host running
// it, a waiting one is canceled in its record and dropped when it comes up; either ends
// canceled, is not retried, and frees its slot.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/objstore"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

func newClient(t *testing.T, h *hosttest.H) *client.Client {
	t.Helper()
	c, err := client.New(context.Background(), h.NC)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// blocking is a run that ends when block is closed, or when its job is stopped.
func blocking(started chan<- string, block <-chan struct{}) func(context.Context, *jobtype.Job) *jobtype.Outcome {
	return func(ctx context.Context, j *jobtype.Job) *jobtype.Outcome {
		started <- j.ID
		select {
		case <-ctx.Done():
			return &jobtype.Outcome{Err: fmt.Errorf("the run was stopped before it finished: %w", context.Cause(ctx)), ExitCode: -1}
		case <-block:
			return &jobtype.Outcome{Result: []byte(`"done"`)}
		}
	}
}

// With one run slot taken, an invoked job is queued from the moment invoke returns; canceled,
// it never runs: the host that takes it drops it. The running one, canceled, ends at once, and
// the slot takes the next job. `host functions` counts the queue meanwhile.
func TestCancelQueuedAndRunningJobs(t *testing.T) {
	started := make(chan string, 4)
	block := make(chan struct{})
	fake := newFake().on("slow", blocking(started, block))
	h := hosttest.NewEngine(t, map[string]string{"slow.sh": "# concurrency: 1\n# retries: 3\necho\n"}, fake)
	c := newClient(t, h)
	ctx := context.Background()

	if err := c.Invoke(ctx, "slow", "first", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if id := <-started; id != "first" {
		t.Fatalf("started %s", id)
	}
	if err := c.Invoke(ctx, "slow", "second", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	// `host job <id>` right after invoke.
	if rec, err := c.Jobs.Get(ctx, "second"); err != nil || rec.Status != jobtype.Queued || rec.Function != "slow" {
		t.Fatalf("record right after invoke: %+v, %v", rec, err)
	}
	queued, err := c.Jobs.Recent(ctx, jobs.Filter{Status: jobtype.Queued}, 0)
	if err != nil || len(queued) != 1 || queued[0].ID != "second" {
		t.Fatalf("jobs --status queued: %v, %v", jobIDs(queued), err)
	}
	fns, err := c.Functions(ctx)
	if err != nil || len(fns) != 1 || fns[0].Name != "slow" || fns[0].Runtime != "bash" || fns[0].Queued != 1 || fns[0].Running != 1 {
		t.Fatalf("functions: %+v, %v", fns, err)
	}

	// An agent.call is queued (and recorded) by the host that forwards it; canceled, its caller
	// hears so when it comes up.
	call := nats.NewMsg(bus.CallSubject("slow"))
	call.Header.Set(bus.HeaderMsgID, "call-1")
	replies := make(chan *nats.Msg, 1)
	go func() { replies <- h.CallMsg(call, `{}`) }()
	h.Eventually("the forwarded call's queued record", func() bool {
		rec, err := c.Jobs.Get(ctx, "call-1")
		return err == nil && rec.Status == jobtype.Queued && rec.Function == "slow"
	})
	if _, err := c.Cancel(ctx, "call-1"); err != nil {
		t.Fatal(err)
	}

	rec, err := c.Cancel(ctx, "second")
	if err != nil || rec.Status != jobtype.Canceled || rec.Was != jobtype.Queued || !rec.Started.IsZero() || !strings.Contains(rec.Error, "before it ran") {
		t.Fatalf("cancel of the queued job: %+v, %v", rec, err)
	}
	rec, err = c.Cancel(ctx, "first")
	if err != nil || rec.Status != jobtype.Canceled || rec.Was != jobtype.Running || rec.StoppedBy != "test" || !strings.Contains(rec.Error, "canceled by") {
		t.Fatalf("cancel of the running job: %+v, %v", rec, err)
	}
	// The slot is free: the canceled queued jobs come up and are dropped, unrun.
	h.WaitLog("canceled job dropped before it ran", 1)
	if reply := h.Next(replies); reply.Header.Get(bus.HeaderJobStatus) != "failed" || !strings.Contains(string(reply.Data), "canceled before it ran") {
		t.Fatalf("the canceled call's reply: %v %s", reply.Header, reply.Data)
	}
	if err := c.Invoke(ctx, "slow", "third", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if id := <-started; id != "third" {
		t.Fatalf("the slot's next run is %s, want third (second was canceled)", id)
	}
	close(block)
	if rec := h.Record("third"); rec.Status != jobtype.Succeeded {
		t.Fatalf("third: %+v", rec)
	}
	settled(t, h, "slow")
	for id, want := range map[string]int{"first": 1, "second": 0, "call-1": 0, "third": 1} {
		if got := fake.attempts(id); len(got) != want {
			t.Errorf("%s ran %d times, want %d (canceled jobs are not retried)", id, len(got), want)
		}
	}
	if rec := h.Record("second"); rec.Status != jobtype.Canceled || !rec.Started.IsZero() {
		t.Fatalf("the dropped job's record: %+v", rec)
	}
	canceled, err := c.Jobs.Recent(ctx, jobs.Filter{Status: jobtype.Canceled, Function: "slow"}, 0)
	if got := slices.Sorted(slices.Values(jobIDs(canceled))); err != nil || !slices.Equal(got, []string{"call-1", "first", "second"}) {
		t.Fatalf("jobs --status canceled: %v, %v", jobIDs(canceled), err)
	}
	fns, err = c.Functions(ctx)
	if err != nil || fns[0].Queued != 0 || fns[0].Running != 0 || fns[0].Succeeded != 1 || fns[0].SuccessRate == nil || *fns[0].SuccessRate != 1 {
		t.Fatalf("functions after: %+v, %v", fns[0], err)
	}

	// Bad input: a clear error of the kind the dashboard answers 409 or 404 for.
	for _, c2 := range []struct {
		id   string
		want error
		says string
	}{
		{"third", client.ErrFinished, "already finished (succeeded"},
		{"first", client.ErrFinished, "already finished (canceled"},
		{"nosuchjob", client.ErrUnknownJob, "no such job"},
		{"a.b", client.ErrUnknownJob, "not a job id"},
	} {
		_, err := c.Cancel(ctx, c2.id)
		if !errors.Is(err, c2.want) || !strings.Contains(err.Error(), c2.says) {
			t.Errorf("cancel %s: %v, want %v saying %q", c2.id, err, c2.want, c2.says)
		}
	}
}

// A job waiting for its retry is canceled in its record; its redelivery is dropped.
func TestCancelRetryingJob(t *testing.T) {
	fake := newFake().on("flaky", failWith(errors.New("flaky failure"), 1))
	h := hosttest.NewEngine(t, map[string]string{"flaky.sh": "# retries: 3\necho\n"}, fake)
	c := newClient(t, h)
	ctx := context.Background()
	if err := c.Invoke(ctx, "flaky", "f1", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	h.WaitLog("job failed; retrying", 0)
	rec, err := c.Cancel(ctx, "f1")
	if err != nil || rec.Status != jobtype.Canceled || rec.Was != jobtype.Retrying {
		t.Fatalf("cancel: %+v, %v", rec, err)
	}
	h.WaitLog("canceled job dropped before it ran", 0)
	settled(t, h, "flaky")
	if got := fake.attempts("f1"); len(got) != 1 {
		t.Fatalf("attempts %v: a canceled job ran again", got)
	}
}

// A canceled job in the jail: its processes (a background one too) are killed, its volume
// write is not committed, it is not retried, and its one run slot takes the next job.
func TestCancelKillsTheJail(t *testing.T) {
	h := hosttest.New(t, map[string]string{"hang.sh": `# sandbox
# concurrency: 1
# retries: 2
# volume: cancel-vol data
if [ "$ARG_QUICK" = 1 ]; then echo '"quick"'; exit 0; fi
echo written > data/file
echo started
sleep 987654 &
sleep 987655
`})
	c := newClient(t, h)
	ctx := context.Background()
	lines := h.Sub(bus.LogsPrefix + "hang.>")
	if err := c.Invoke(ctx, "hang", "hang-1", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	for string(h.Next(lines).Data) != "started" { // the host's own lines come first
	}
	h.Eventually("the job's processes run", func() bool { return len(procsWith("987654", "987655")) == 2 })
	rec, err := c.Cancel(ctx, "hang-1")
	if err != nil || rec.Status != jobtype.Canceled {
		t.Fatalf("cancel: %+v, %v", rec, err)
	}
	if left := procsWith("987654", "987655"); len(left) > 0 {
		t.Fatalf("processes of the canceled job still run: %v", left)
	}
	for _, v := range rec.Volumes {
		if v.Committed != 0 {
			t.Fatalf("a canceled job committed its volume: %+v", v)
		}
	}
	if hist := volumeHistory(t, h, "cancel-vol"); len(hist) != 0 {
		t.Fatalf("a canceled job's volume has versions: %+v", hist)
	}
	if err := c.Invoke(ctx, "hang", "hang-2", []byte(`{"quick":1}`)); err != nil {
		t.Fatal(err)
	}
	if rec := h.Record("hang-2"); rec.Status != jobtype.Succeeded {
		t.Fatalf("the next job in the slot: %+v", rec)
	}
	if rec := h.Record("hang-1"); rec.Status != jobtype.Canceled || rec.Attempts != 1 {
		t.Fatalf("the canceled job was retried: %+v", rec)
	}
}

func jobIDs(recs []*jobs.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.ID
	}
	return out
}

// procsWith lists the pids of processes on this machine, jailed or not, whose command line
// holds one of the markers as an argument.
func procsWith(markers ...string) []string {
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var out []string
	for _, p := range dirs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, arg := range bytes.Split(b, []byte{0}) {
			if slices.Contains(markers, string(arg)) {
				out = append(out, filepath.Base(filepath.Dir(p)))
			}
		}
	}
	return out
}

// volumeHistory lists the committed versions of a volume in the JetStream object store.
func volumeHistory(t *testing.T, h *hosttest.H, name string) []objstore.VersionInfo {
	t.Helper()
	ctx := context.Background()
	js, err := jetstream.New(h.NC)
	if err != nil {
		t.Fatal(err)
	}
	b, err := objstore.NewJetStreamBackend(ctx, js, objstore.DefaultJetStreamBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	v, err := objstore.New(ctx, js, b, objstore.Options{Log: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	hist, err := v.History(ctx, name)
	if err != nil && !strings.Contains(err.Error(), "no") {
		t.Fatal(err)
	}
	return hist
}

// A job a draining host still runs can be canceled: the drain then ends with it.
func TestCancelWhileDraining(t *testing.T) {
	started := make(chan string, 1)
	fake := newFake().on("slow", blocking(started, make(chan struct{})))
	h := hosttest.NewEngine(t, map[string]string{"slow.sh": "echo\n"}, fake)
	c := newClient(t, h)
	ctx := context.Background()
	if err := c.Invoke(ctx, "slow", "d1", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	<-started
	drained := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, time.Minute) // a bound on a failure only: the cancel ends the drain
		defer cancel()
		drained <- h.Host.Shutdown(sctx)
	}()
	h.WaitLog("draining: no new jobs are taken; waiting for running jobs", 0)
	rec, err := c.Cancel(ctx, "d1")
	if err != nil || rec.StoppedBy != "test" || rec.Status != jobtype.Canceled {
		t.Fatalf("cancel while draining: %+v, %v", rec, err)
	}
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
}
