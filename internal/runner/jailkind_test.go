package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/sandbox"
)

// fakeJail is a Jail whose runs print their jail's name as the result (a bash function's last
// line), or fail to start with startErr; it counts what was started and destroyed.
type fakeJail struct {
	name     string
	startErr error

	mu                 sync.Mutex
	starts, destroyed  int
	workDirs, envHomes []string
}

func (j *fakeJail) Name() string          { return j.name }
func (j *fakeJail) Owner() (uid, gid int) { return os.Geteuid(), os.Getegid() }

func (j *fakeJail) Start(ctx context.Context, spec *sandbox.Spec) (sandbox.Handle, error) {
	j.mu.Lock()
	j.starts++
	j.workDirs = append(j.workDirs, spec.WorkDir)
	j.mu.Unlock()
	if j.startErr != nil {
		return nil, j.startErr
	}
	fmt.Fprintf(spec.Stdout, "%q\n", j.name)
	return &fakeHandle{j: j}, nil
}

func (j *fakeJail) counts() (starts, destroyed int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.starts, j.destroyed
}

type fakeHandle struct {
	j    *fakeJail
	once sync.Once
}

func (h *fakeHandle) Wait(context.Context) <-chan *sandbox.Result {
	c := make(chan *sandbox.Result, 1)
	c <- &sandbox.Result{}
	close(c)
	return c
}
func (h *fakeHandle) End(int) {}
func (h *fakeHandle) Kill()   {}
func (h *fakeHandle) Destroy() {
	h.once.Do(func() {
		h.j.mu.Lock()
		h.j.destroyed++
		h.j.mu.Unlock()
	})
}

// fakeKind is a jail kind that fits unless why says why not, has jail ready unless it is nil,
// and lays its jobs out as cold ones. Its jail is gone, for unserved, when it fails with gone;
// held, when not nil, is what its lease holds before the job starts.
type fakeKind struct {
	r    *Runner
	name string
	why  string
	jail sandbox.Jail
	gone error
	held *fakeHeld
}

func (k *fakeKind) served() string                  { return k.name }
func (k *fakeKind) fits(*functions.Function) string { return k.why }
func (k *fakeKind) acquire(*task) *lease {
	if k.jail == nil {
		return nil
	}
	l := &lease{kind: k, jail: k.jail}
	if k.held != nil {
		l.held = k.held
	}
	return l
}
func (k *fakeKind) layOut(ctx context.Context, job *task, p *prepared, in *layIn) error {
	return k.r.prepareCold(ctx, job, p, in)
}
func (k *fakeKind) unserved(_ *task, err error) bool { return k.gone != nil && errors.Is(err, k.gone) }

type fakeHeld struct {
	mu     sync.Mutex
	closed int
}

func (h *fakeHeld) Close() error {
	h.mu.Lock()
	h.closed++
	h.mu.Unlock()
	return nil
}

func (h *fakeHeld) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

// newFakeRunner is a runner whose host jail is cold, a fake; no bubblewrap needed.
func newFakeRunner(t *testing.T) (*Runner, *fakeJail, string) {
	t.Helper()
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	cold := &fakeJail{name: "cold"}
	r, err := New(Config{RunDir: filepath.Join(dir, "run"), ShimDir: filepath.Join(dir, "shims"), Jail: cold, MaxResultBytes: 1 << 20, JobDisk: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, cold, dir
}

func runFake(t *testing.T, r *Runner, fn *functions.Function, code, id string) *jobtype.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, _ := r.Run(ctx, fn, code, &jobtype.Job{ID: id, Payload: []byte(`{}`)})
	return out
}

// noJobDirs fails unless the run directory empties (a job's directory goes in the background).
func noJobDirs(t *testing.T, r *Runner) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		left, _ := os.ReadDir(r.cfg.RunDir)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("left in the run directory: %v", left)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestChooseKinds: a job runs in the jail of the first kind that fits it and has one ready;
// the kinds before it start nothing; the outcome and the metrics name the kind.
func TestChooseKinds(t *testing.T) {
	r, cold, dir := newFakeRunner(t)
	fn, code := bashFunction(t, dir, "pick", "true\n", 0)
	unfit := &fakeJail{name: "unfit"}
	ready := &fakeJail{name: "ready"}
	r.kinds = []jailKind{
		&fakeKind{r: r, name: "unfit", why: "it cannot", jail: unfit},
		&fakeKind{r: r, name: "none", jail: nil},
		&fakeKind{r: r, name: "ready", jail: ready},
		coldKind{r},
	}
	out := runFake(t, r, fn, code, "j1")
	if out.Err != nil || string(out.Result) != `"ready"` || out.Served != "ready" {
		t.Fatalf("outcome %v, result %s, served %q; want the kind ready", out.Err, out.Result, out.Served)
	}
	if s, _ := unfit.counts(); s != 0 {
		t.Errorf("the unfit kind's jail was started %d times", s)
	}
	if s, _ := cold.counts(); s != 0 {
		t.Errorf("cold was started %d times, with a kind ready before it", s)
	}
	if s, d := ready.counts(); s != 1 || d != 1 {
		t.Errorf("ready: %d starts, %d destroyed; want 1, 1", s, d)
	}
	if got := counterValue(r.forks.m.served.WithLabelValues(fn.Name, "ready")); got != 1 {
		t.Errorf("host_jobs_served_total{how=ready} = %v", got)
	}
	noJobDirs(t, r)

	// The real kinds: no fork (off), no warm jail (none kept): cold.
	r.kinds = r.jailKinds()
	out = runFake(t, r, fn, code, "j2")
	if out.Err != nil || string(out.Result) != `"cold"` || out.Served != ServedCold {
		t.Fatalf("outcome %v, result %s, served %q; want cold", out.Err, out.Result, out.Served)
	}
	l, rest := r.choose(&task{Job: &jobtype.Job{}, Fn: fn, CodeDir: code}, r.kinds)
	if l == nil || l.kind.served() != ServedCold || len(rest) != 0 || l.jail != r.cfg.Jail {
		t.Fatalf("choose: %+v, then %v; want the host's jail, cold", l, rest)
	}
	// A function without `sandbox` runs directly, and is no jailed job.
	direct := &functions.Function{Name: "d", Spec: &annot.Spec{}}
	if l, _ := r.choose(&task{Job: &jobtype.Job{}, Fn: direct}, r.kinds); l.jail != r.cfg.Direct {
		t.Fatalf("an unjailed function's jail is %v, want Direct", l.jail)
	}
	noJobDirs(t, r)
}

// TestStartFails: a jail that cannot start fails the job, saying so; nothing is left.
func TestStartFails(t *testing.T) {
	r, cold, dir := newFakeRunner(t)
	cold.startErr = errors.New("no such jail tool")
	fn, code := bashFunction(t, dir, "nostart", "true\n", 0)
	out := runFake(t, r, fn, code, "j1")
	if out.Err == nil || !strings.Contains(out.Err.Error(), "start nostart: no such jail tool") {
		t.Fatalf("outcome %v, want the start's error", out.Err)
	}
	if s, _ := cold.counts(); s != 1 {
		t.Fatalf("%d starts, want 1", s)
	}
	noJobDirs(t, r)
}

// TestUnservedFallsThrough: a jail that was gone before the job reached it (its kind says so)
// is released, what it held included, and the job runs in the next kind's; a start failure it
// does not call gone fails the job.
func TestUnservedFallsThrough(t *testing.T) {
	r, cold, dir := newFakeRunner(t)
	fn, code := bashFunction(t, dir, "gone", "true\n", 0)
	errGone := errors.New("gone before the job")
	held := &fakeHeld{}
	dead := &fakeJail{name: "dead", startErr: fmt.Errorf("start: %w", errGone)}
	r.kinds = []jailKind{&fakeKind{r: r, name: "dead", jail: dead, gone: errGone, held: held}, coldKind{r}}
	out := runFake(t, r, fn, code, "j1")
	if out.Err != nil || string(out.Result) != `"cold"` || out.Served != ServedCold {
		t.Fatalf("outcome %v, result %s, served %q; want cold", out.Err, out.Result, out.Served)
	}
	if n := held.count(); n != 1 {
		t.Errorf("the dead jail's lease was closed %d times, want 1", n)
	}
	if s, d := cold.counts(); s != 1 || d != 1 {
		t.Errorf("cold: %d starts, %d destroyed; want 1, 1", s, d)
	}
	noJobDirs(t, r)

	// Not gone: the job fails, and its lease is released all the same.
	dead.startErr = errors.New("broken")
	out = runFake(t, r, fn, code, "j2")
	if out.Err == nil || !strings.Contains(out.Err.Error(), "broken") || out.Served != "dead" {
		t.Fatalf("outcome %v, served %q; want the start's error from dead", out.Err, out.Served)
	}
	if n := held.count(); n != 2 {
		t.Errorf("the lease was closed %d times in all, want 2", n)
	}
	noJobDirs(t, r)
}

// TestPrepareFailsReleases: a job that fails while being laid out releases its lease.
func TestPrepareFailsReleases(t *testing.T) {
	r, _, dir := newFakeRunner(t)
	fn, code := bashFunction(t, dir, "vols", "true\n", 0)
	fn.Spec.Volumes = []annot.Volume{{Name: "data", Path: "data"}} // no volume store
	held := &fakeHeld{}
	jail := &fakeJail{name: "k"}
	r.kinds = []jailKind{&fakeKind{r: r, name: "k", jail: jail, held: held}}
	out := runFake(t, r, fn, code, "j1")
	if out.Err == nil || !strings.Contains(out.Err.Error(), "no volume store") {
		t.Fatalf("outcome %v, want no volume store", out.Err)
	}
	if s, _ := jail.counts(); s != 0 || held.count() != 1 {
		t.Fatalf("%d starts, lease closed %d times; want 0, 1", s, held.count())
	}
	noJobDirs(t, r)
}

// TestWarmGoneRunsCold: a warm jail taken alive but found dead at its hand-over never sees
// the job: it is closed, its directory removed, and the job runs cold.
func TestWarmGoneRunsCold(t *testing.T) {
	r, cold, dir := newFakeRunner(t)
	fn, code := bashFunction(t, dir, "w", "true\n", 0)
	one := 1
	fn.Spec.Warm = &one // else the warm kind does not fit it
	w := deadWarmJail(t, r, fn)
	r.kinds = []jailKind{&takenWarm{warmKind{r}, w}, coldKind{r}}
	out := runFake(t, r, fn, code, "j1")
	if out.Err != nil || string(out.Result) != `"cold"` || out.Served != ServedCold {
		t.Fatalf("outcome %v, result %s, served %q; want cold", out.Err, out.Result, out.Served)
	}
	if w.ctx.Err() == nil {
		t.Error("the dead warm jail was not closed")
	}
	if s, d := cold.counts(); s != 1 || d != 1 {
		t.Errorf("cold: %d starts, %d destroyed; want 1, 1", s, d)
	}
	noJobDirs(t, r)
}

// takenWarm is the warm kind, with w the jail it takes.
type takenWarm struct {
	warmKind
	w *warmJail
}

func (k *takenWarm) acquire(*task) *lease { return k.w.lease(k) }

// deadWarmJail is a warm jail of fn, laid out, whose jail ended before any job took it.
func deadWarmJail(t *testing.T, r *Runner, fn *functions.Function) *warmJail {
	t.Helper()
	jd, err := r.makeJobDir(fn, "warm-"+fn.Name+"-")
	if err != nil {
		t.Fatal(err)
	}
	_, stdin, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	w := &warmJail{fn: fn, jd: jd, placeholders: map[string]string{}, stdin: stdin,
		stdout: &handoffWriter{ready: make(chan struct{})}, stderr: &handoffWriter{},
		started: make(chan struct{}), exited: make(chan struct{}), err: errors.New("it died")}
	w.ctx, w.cancel = context.WithCancelCause(context.Background())
	close(w.started)
	close(w.exited)
	return w
}
