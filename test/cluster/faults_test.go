package cluster_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// slowFlow is a two-step flow whose first step runs for a while.
const slowFlow = "# sandbox\n# next: agent.run.%s\necho started >&2\nsleep %s\ncat\n"

// waitStep waits for the record of fn's job in a flow to be final and returns it; records are
// in JetStream, so this works across NATS restarts where a core subscription could miss an event.
func waitStep(t *testing.T, e *env, fn, flow string, within time.Duration) *jobs.Record {
	t.Helper()
	var rec *jobs.Record
	natstest.Poll(within, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := jobs.Bind(ctx, e.js)
		if err != nil {
			return false // the test's own connection may still be reconnecting
		}
		recs, err := st.List(ctx, func(r *jobs.Record) bool { return r.FlowID == flow && r.Function == fn })
		if err == nil && len(recs) > 0 && recs[0].Status.Final() {
			rec = recs[0]
			return true
		}
		return false
	})
	if rec == nil {
		t.Fatalf("%s of flow %s did not finish within %s", fn, flow, within)
	}
	return rec
}

// TestNATSRestartDuringARun stops the NATS server (gracefully, as an operator restarting it
// would) while a job runs, keeps it down until well after the job has finished, then starts it
// again on the same port and store: the held outputs are published
// once, the flow finishes, and new work is consumed.
func TestNATSRestartDuringARun(t *testing.T) {
	t.Parallel()
	dir := tempDir(t, "restart-nats-")
	natsd := startNATS(t, dir, 0)
	e := newEnv(t, natsd.url())
	e.fn("slow1.sh", fmt.Sprintf(slowFlow, "slow2", "2"))
	e.fn("slow2.sh", step2Fn)
	h := e.host(hostOpts{name: "restart-a", ackWait: 2 * time.Second})
	stored := e.observe("agent.run.slow2")
	lines := e.logs("slow1")
	if err := e.publish("agent.run.slow1", "restart-1", []byte(`{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	if len(lines.waitCount(30*time.Second, "restart-1", "started", 1)) == 0 {
		t.Fatal("the job did not start")
	}
	down := time.Now()
	natsd.signal(syscall.SIGTERM)
	if err := natsd.wait(30 * time.Second); err != nil && !isExit(err) {
		t.Fatal(err)
	}
	// The run ends 2 s after it started, inside the outage: its outputs must be held.
	time.Sleep(4 * time.Second) // NATS stays down this long: the fault itself
	natsd.start(t)
	back := time.Now()
	rec1 := waitStep(t, e, "slow1", "restart-1", 60*time.Second)
	rec2 := waitStep(t, e, "slow2", "restart-1", 60*time.Second)
	t.Logf("NATS down %s; step1's run ended %s into the outage; after NATS came back: step1 %s (attempts %d), step2 %s %s later; step2 stored %d time(s)",
		back.Sub(down).Round(time.Millisecond), rec1.Finished.Sub(down).Round(time.Millisecond), rec1.Status, rec1.Attempts, rec2.Status,
		rec2.Finished.Sub(back).Round(time.Millisecond), stored.count("restart-1"))
	// With a 2 s ack wait, the restarted server may hand the message out again before the
	// reconnecting host's ack lands; a second attempt is then allowed, its outputs deduplicate.
	if rec1.Attempts > 2 {
		t.Errorf("the run in flight took %d attempts", rec1.Attempts)
	}
	if rec1.Status != jobtype.Succeeded || rec2.Status != jobtype.Succeeded {
		t.Errorf("step1 %+v\nstep2 %+v", rec1, rec2)
	}
	if !natstest.Poll(60*time.Second, func() bool { return stored.count("restart-1") == 1 }) {
		t.Errorf("step2 stored %d times, want once", stored.count("restart-1"))
	}
	// Consumption resumes.
	results := e.watch("slow2")
	if err := e.publish("agent.run.slow1", "restart-2", []byte(`{"n":2}`)); err != nil {
		t.Fatal(err)
	}
	if !natstest.Poll(60*time.Second, func() bool { return results.flowsDone("slow2") == 1 }) {
		t.Fatal("a flow published after the restart did not finish")
	}
	if !h.healthy() {
		t.Error("the host is not healthy after NATS came back")
	}
}

// TestNATSUnreachableWhileARunFinishes freezes the NATS server (SIGSTOP: its connections stay
// open and nothing answers, as in a network partition) while a job runs, past its end and past
// the ack wait, then thaws it. The flow must finish with its next step triggered once.
func TestNATSUnreachableWhileARunFinishes(t *testing.T) {
	t.Parallel()
	dir := tempDir(t, "freeze-nats-")
	natsd := startNATS(t, dir, 0)
	e := newEnv(t, natsd.url())
	e.fn("frz1.sh", fmt.Sprintf(slowFlow, "frz2", "1"))
	e.fn("frz2.sh", step2Fn)
	e.host(hostOpts{name: "freeze-a", ackWait: 2 * time.Second})
	stored := e.observe("agent.run.frz2")
	lines := e.logs("frz1")
	if err := e.publish("agent.run.frz1", "freeze-1", []byte(`{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	if len(lines.waitCount(30*time.Second, "freeze-1", "started", 1)) == 0 {
		t.Fatal("the job did not start")
	}
	natsd.signal(syscall.SIGSTOP)
	frozen := 5 * time.Second
	time.Sleep(frozen) // how long NATS is unreachable: the fault itself
	natsd.signal(syscall.SIGCONT)
	back := time.Now()
	rec1 := waitStep(t, e, "frz1", "freeze-1", 60*time.Second)
	rec2 := waitStep(t, e, "frz2", "freeze-1", 60*time.Second)
	natstest.Poll(60*time.Second, func() bool { ok, _ := e.consumerSettled("frz1"); return ok })
	t.Logf("NATS unreachable %s (the run ended inside it); step1 %s after %d attempt(s), step2 %s %s after NATS answered again; step2 stored %d time(s); \"started\" lines %d",
		frozen, rec1.Status, rec1.Attempts, rec2.Status, rec2.Finished.Sub(back).Round(time.Millisecond), stored.count("freeze-1"),
		len(lines.matching("freeze-1", "started")))
	if rec1.Status != jobtype.Succeeded || rec2.Status != jobtype.Succeeded {
		t.Errorf("step1 %+v\nstep2 %+v", rec1, rec2)
	}
	if stored.count("freeze-1") != 1 {
		t.Errorf("step2 stored %d times, want once", stored.count("freeze-1"))
	}
	if ok, info := e.consumerSettled("frz1"); !ok {
		t.Errorf("unsettled: %s", info)
	}
}

func isExit(err error) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee)
}

// TestS3DownForAWhile stops the S3 store twice: before a run that needs its volume, and in the
// middle of a run's upload. Each run waits and retries; once the store is back it commits, and
// the volume's history holds whole versions only.
func TestS3DownForAWhile(t *testing.T) {
	t.Parallel()
	dir := tempDir(t, "s3down-")
	natsd := startNATS(t, dir, 0)
	s3 := startVersity(t, dir)
	uploads := make(chan struct{}, 1)
	p := startProxy(t, s3.addr, splitLines, func(toServer bool, unit []byte) bool {
		if toServer && bytes.Contains(unit, []byte("PUT ")) && bytes.Contains(unit, []byte("/volumes/ledger/blobs/")) {
			select {
			case uploads <- struct{}{}:
			default:
			}
		}
		return false
	})
	e := newEnv(t, natsd.url())
	e.fn("ledger.sh", `# sandbox
# volume: ledger vol
echo "$ARG_N" >> vol/entries
for i in 1 2 3 4 5 6; do yes "$ARG_N $i" | head -c 200000 > vol/blob-$i; done
wc -l < vol/entries
`)
	cfg := s3.cfg
	cfg.Endpoint = p.addr()
	e.host(hostOpts{name: "s3down-a", ackWait: 2 * time.Second, s3: &cfg})
	results := e.watch("ledger")
	run := func(n int) {
		if err := e.publish("agent.run.ledger", fmt.Sprintf("ledger-%d", n), fmt.Appendf(nil, `{"n":%d}`, n)); err != nil {
			t.Fatal(err)
		}
	}
	waitRun := func(n int) *jobs.Record {
		if !natstest.Poll(90*time.Second, func() bool { return results.flowsDone("ledger") >= n }) {
			t.Fatalf("run %d did not finish; errors: %v", n, results.errorEvents())
		}
		rec, err := e.store().Get(e.ctx(10*time.Second), fmt.Sprintf("ledger-%d", n))
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	run(1)
	waitRun(1)

	// Down before the run.
	s3.kill()
	run(2)
	time.Sleep(3 * time.Second) // S3 stays down this long: the fault itself
	if results.flowsDone("ledger") != 1 {
		t.Fatal("a run finished while its volume store was down")
	}
	s3.start(t)
	back := time.Now()
	rec2 := waitRun(2)
	t.Logf("S3 down before run 2: it finished %s after S3 came back, attempts %d", rec2.Finished.Sub(back).Round(time.Millisecond), rec2.Attempts)

	// Down in the middle of the upload.
	for len(uploads) > 0 {
		<-uploads
	}
	run(3)
	select {
	case <-uploads:
	case <-time.After(60 * time.Second):
		t.Fatal("run 3 never uploaded")
	}
	s3.kill()
	time.Sleep(3 * time.Second) // S3 stays down this long: the fault itself
	s3.start(t)
	back = time.Now()
	rec3 := waitRun(3)
	t.Logf("S3 killed during run 3's upload: it finished %s after S3 came back, attempts %d", rec3.Finished.Sub(back).Round(time.Millisecond), rec3.Attempts)

	vols := e.volumes(&s3.cfg, 1)
	ctx := e.ctx(time.Minute)
	hist, err := vols.History(ctx, "ledger")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := readVolume(ctx, vols, "ledger", "entries")
	if err != nil {
		t.Fatal(err)
	}
	var versions []uint64
	for _, h := range hist {
		versions = append(versions, h.Version)
	}
	t.Logf("ledger history %v, entries %q", versions, entries)
	if entries != "1\n2\n3\n" || len(hist) != 3 || hist[2].Version != 3 {
		t.Errorf("ledger after two S3 outages: versions %v, entries %q; want versions 1-3 and entries 1,2,3", versions, entries)
	}
	for i := 1; i <= 6; i++ {
		got, err := readVolume(ctx, vols, "ledger", fmt.Sprintf("blob-%d", i))
		want := strings.Repeat(fmt.Sprintf("3 %d\n", i), 200000/4+1)[:200000]
		if err != nil || got != want {
			t.Errorf("blob-%d: %d bytes (err %v), not run 3's whole file", i, len(got), err)
		}
	}
	if ev := results.errorEvents(); len(ev) > 0 {
		t.Errorf("error events: %v", ev)
	}
}

// TestFullDataDisk runs a host whose data directory is a small tmpfs, fills it, and runs jobs:
// they fail with an error that says the disk is full, the host stays up, the volume in the
// store is untouched, and once space is freed the same host serves again and reads the volume
// intact.
func TestFullDataDisk(t *testing.T) {
	t.Parallel() // mostly waiting
	dir := tempDir(t, "fulldisk-")
	natsd := startNATS(t, dir, 0)
	e := newEnv(t, natsd.url())
	// The seeding host has room; the other one's data directory is a small tmpfs.
	seedFns, fullFns := filepath.Join(e.dir, "fn-seed"), filepath.Join(e.dir, "fn-full")
	writeFile(t, filepath.Join(seedFns, "seed.sh"), "# sandbox\n# volume: big vol\nhead -c 1048576 /dev/urandom > vol/blob\nsha256sum vol/blob | cut -c1-64\n")
	writeFile(t, filepath.Join(fullFns, "reader.sh"), "# sandbox\n# volume: big vol\nsha256sum vol/blob | cut -c1-64\n")
	writeFile(t, filepath.Join(fullFns, "hello.sh"), "# sandbox\necho '\"hi\"'\n")
	// The host keeps a copy of its own binary in the data directory (the jail's init); the
	// tmpfs has room for that and a few MiB more.
	bin, err := os.Stat(hostBin)
	if err != nil {
		t.Fatal(err)
	}
	size := bin.Size()>>20 + 8
	mnt := filepath.Join(dir, "tmpfs")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dm,mode=0755", size), "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("SKIPPED LOUDLY: cannot mount a tmpfs here: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() }) // after the host is killed
	seed := e.host(hostOpts{name: "seed", fnDir: seedFns})
	if err := e.publish("agent.run.seed", "seed-1", nil); err != nil {
		t.Fatal(err)
	}
	rec, err := e.store().WaitFinal(e.ctx(60*time.Second), "seed-1")
	if err != nil || rec.Status != jobtype.Succeeded {
		t.Fatalf("seed: %v %+v", err, rec)
	}
	sum := strings.Trim(string(rec.Result), `"`)
	seed.kill()

	full := e.host(hostOpts{name: "full", fnDir: fullFns, dataDir: filepath.Join(mnt, "data")})
	filler := filepath.Join(mnt, "filler")
	fill(t, filler)
	if err := e.publish("agent.run.hello", "full-hello-1", nil); err != nil {
		t.Fatal(err)
	}
	hello, err := e.store().WaitFinal(e.ctx(60*time.Second), "full-hello-1")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a job on the full disk: status %s, attempts %d, error %q", hello.Status, hello.Attempts, hello.Error)
	// A job that needs no room beyond a few directories may still run; if it failed, it must
	// say why.
	if hello.Status != jobtype.Succeeded && !strings.Contains(hello.Error, "no space left on device") {
		t.Errorf("a job on a full data disk: error %q does not say the disk is full", hello.Error)
	}
	if !full.healthy() {
		t.Error("the host is not healthy with a full data disk")
	}

	// With a little room (for the job's directory, not for the volume's 1 MiB), a job that
	// needs the volume cannot sync it in: it must say why, and commit nothing.
	if err := os.Truncate(filler, fileSize(t, filler)-256<<10); err != nil {
		t.Fatal(err)
	}
	if err := e.publish("agent.run.reader", "full-read-1", nil); err != nil {
		t.Fatal(err)
	}
	var reading *jobs.Record
	natstest.Poll(30*time.Second, func() bool {
		r, err := e.store().Get(e.ctx(10*time.Second), "full-read-1")
		if err == nil && r.Error != "" {
			reading = r
			return true
		}
		return false
	})
	if reading == nil {
		t.Fatal("the volume job on the full disk left no error in its record")
	}
	t.Logf("a volume job on the nearly full disk: status %s, attempts %d, error %q", reading.Status, reading.Attempts, reading.Error)
	if !strings.Contains(reading.Error, "no space left on device") {
		t.Errorf("the volume job's error %q does not say the disk is full", reading.Error)
	} else if strings.Contains(reading.Error, "check that the store is up") {
		t.Errorf("BUG: a full local disk is reported as a volume store failure (after retrying it for 30 s): %q", reading.Error)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if reading.Status != jobtype.Failed {
		// Handed back while the disk was full: once there is room it must read the volume whole.
		rec, err := e.store().WaitFinal(e.ctx(90*time.Second), "full-read-1")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("after space was freed, the volume job: status %s, attempts %d", rec.Status, rec.Attempts)
		if rec.Status != jobtype.Succeeded || strings.Trim(string(rec.Result), `"`) != sum {
			t.Errorf("after space was freed the volume job read %s (%s), want the seeded %s", rec.Result, rec.Status, sum)
		}
	}
	if err := e.publish("agent.run.reader", "full-read-2", nil); err != nil {
		t.Fatal(err)
	}
	if r, err := e.store().WaitFinal(e.ctx(60*time.Second), "full-read-2"); err != nil || strings.Trim(string(r.Result), `"`) != sum {
		t.Errorf("reading the volume with room again: %v %+v, want %s", err, r, sum)
	}
	// The host serves again, and the volume in the store is whole and unchanged.
	if err := e.publish("agent.run.hello", "full-hello-2", nil); err != nil {
		t.Fatal(err)
	}
	if r, err := e.store().WaitFinal(e.ctx(60*time.Second), "full-hello-2"); err != nil || r.Status != jobtype.Succeeded {
		t.Errorf("after space was freed: %v %+v", err, r)
	}
	vols := e.volumes(nil, 1)
	ctx := e.ctx(time.Minute)
	blob, err := readVolume(ctx, vols, "big", "blob")
	if err != nil || len(blob) != 1<<20 || latestVersion(ctx, vols, "big") != 1 {
		t.Errorf("volume big: %d bytes, version %d, err %v; want the seeded version 1", len(blob), latestVersion(ctx, vols, "big"), err)
	}
	if got := fmt.Sprintf("%x", sha256.Sum256([]byte(blob))); got != sum {
		t.Errorf("volume big changed: sha256 %s, seeded %s", got, sum)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// fill writes to path until the file system is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	// Small writes fill the last partial page.
	for {
		if _, err := f.Write(chunk[:512]); err != nil {
			break
		}
	}
}

// TestJobOutlivesItsAckWait runs a job four times as long as the ack wait, with a second host
// idle and waiting for work: the in-progress signals keep the message, so it runs once.
func TestJobOutlivesItsAckWait(t *testing.T) {
	t.Parallel()
	const ackWait = 2 * time.Second
	dir := tempDir(t, "ackwait-nats-")
	natsd := startNATS(t, dir, 0)
	e := newEnv(t, natsd.url())
	e.fn("long.sh", "# sandbox\necho started >&2\nsleep 8\necho '\"done\"'\n")
	e.host(hostOpts{name: "long-a", ackWait: ackWait})
	e.host(hostOpts{name: "long-b", ackWait: ackWait})
	results := e.watch("long")
	lines := e.logs("long")
	if err := e.publish("agent.run.long", "long-1", nil); err != nil {
		t.Fatal(err)
	}
	rec, err := e.store().WaitFinal(e.ctx(60*time.Second), "long-1")
	if err != nil {
		t.Fatal(err)
	}
	natstest.Poll(60*time.Second, func() bool { return results.flowsDone("long") == 1 })
	starts := len(lines.matching("long-1", "started"))
	t.Logf("a %s run with a %s ack wait: status %s, attempts %d, started %d time(s), results %d",
		rec.RunTime().Round(time.Millisecond), ackWait, rec.Status, rec.Attempts, starts, results.reruns("long")+1)
	if rec.Status != jobtype.Succeeded || rec.Attempts != 1 || starts != 1 || results.reruns("long") != 0 {
		t.Errorf("the long job was not kept by its host: %+v, started %d times", rec, starts)
	}
}

// TestSIGTERMDrainsABurst sends SIGTERM to one of two hosts in the middle of a burst: its
// running jobs finish there, it takes nothing new, it exits cleanly, and every job of the
// burst finishes exactly once.
func TestSIGTERMDrainsABurst(t *testing.T) {
	t.Parallel()
	const jobsN = 16
	dir := tempDir(t, "drain-nats-")
	natsd := startNATS(t, dir, 0)
	e := newEnv(t, natsd.url())
	// Two slots whatever the machine's CPU count (the host's default): the test needs two runs
	// in flight on host a.
	e.fn("burst.sh", "# sandbox\n# concurrency: 2\necho started >&2\nsleep 1.5\necho \"{\\\"n\\\":$ARG_N}\"\n")
	a := e.host(hostOpts{name: "drain-a"})
	e.host(hostOpts{name: "drain-b"})
	results := e.watch("burst")
	var ids []string
	for i := range jobsN {
		id := fmt.Sprintf("burst-%02d", i)
		ids = append(ids, id)
		if err := e.publish("agent.run.burst", id, fmt.Appendf(nil, `{"n":%d}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	if !natstest.Poll(30*time.Second, func() bool { return a.metric("host_runs_in_flight") >= 2 }) {
		t.Fatal("host a never had two runs in flight")
	}
	termAt := time.Now()
	a.signal(syscall.SIGTERM)
	exitErr := a.wait(60 * time.Second)
	exitedAt := time.Now()
	if !natstest.Poll(60*time.Second, func() bool { return len(results.missing("burst", ids)) == 0 }) {
		t.Fatalf("jobs never finished: %v", results.missing("burst", ids))
	}
	var onA, finishedAfterTerm, takenAfterTerm, redelivered int
	for _, r := range e.records() {
		if r.Function != "burst" {
			continue
		}
		if r.Attempts > 1 {
			redelivered++
		}
		if r.Host != "drain-a" {
			continue
		}
		onA++
		if r.Finished.After(termAt) {
			finishedAfterTerm++
		}
		if r.Started.After(termAt) {
			takenAfterTerm++
		}
		if r.Status != jobtype.Succeeded || r.Finished.After(exitedAt) {
			t.Errorf("job %s on the drained host: %s, finished %s after it exited", r.ID, r.Status, r.Finished.Sub(exitedAt))
		}
	}
	t.Logf("SIGTERM during a burst of %d: host a ran %d jobs, %d of them were running at SIGTERM and finished there; it took %d after SIGTERM; "+
		"it exited %s after SIGTERM (%v); jobs delivered more than once: %d; reruns %d",
		jobsN, onA, finishedAfterTerm, takenAfterTerm, exitedAt.Sub(termAt).Round(time.Millisecond), exitErr, redelivered, results.reruns("burst"))
	if exitErr != nil {
		t.Errorf("the drained host exited with %v, want a clean exit", exitErr)
	}
	if finishedAfterTerm == 0 {
		t.Error("no run was in flight on host a at SIGTERM; the drain was not exercised")
	}
	if takenAfterTerm > 0 {
		t.Errorf("host a started %d jobs after SIGTERM", takenAfterTerm)
	}
	if s := results.splitFlows("burst"); results.reruns("burst") > 0 || len(s) > 0 {
		t.Errorf("jobs ran more than once: reruns %d %v", results.reruns("burst"), s)
	}
}

// TestNextStepNotTriggeredTwiceAcrossNATSRestart combines two faults the issue names: a host
// killed after its job's outputs were published but before its ack, and a NATS restart. The
// next step consumes its trigger (with interest retention the stream then drops it), NATS
// restarts, and the killed job runs again and publishes its next-step message with the same
// id. The stream's duplicate window must still drop it, or the host must see that the next step
// already ran: either way the next step must not run twice.
func TestNextStepNotTriggeredTwiceAcrossNATSRestart(t *testing.T) {
	t.Parallel()
	const ackWait = 2 * time.Second
	dir := tempDir(t, "dedup-nats-")
	natsd := startNATS(t, dir, 0)
	e := newEnv(t, natsd.url())
	// The first step's hosts and the second step's host serve different directories, so the
	// victim's frozen connection cannot take the second step.
	firstFns, secondFns := filepath.Join(e.dir, "fn-first"), filepath.Join(e.dir, "fn-second")
	writeFile(t, filepath.Join(firstFns, "dd1.sh"), "# sandbox\n# next: agent.run.dd2\ncat\n")
	writeFile(t, filepath.Join(secondFns, "dd2.sh"), step2Fn)
	p := startProxy(t, strings.TrimPrefix(natsd.url(), "nats://"), splitNATS, func(toServer bool, unit []byte) bool {
		_, subject, _, body, ok := natsMsg(unit)
		return ok && toServer && strings.HasPrefix(subject, "$JS.ACK.AGENT_RUN.fn_dd1.") && bytes.HasPrefix(body, []byte("+ACK"))
	})
	victim := e.host(hostOpts{name: "dedup-victim", natsURL: "nats://" + p.addr(), fnDir: firstFns, ackWait: ackWait})
	e.host(hostOpts{name: "dedup-second", fnDir: secondFns, ackWait: ackWait})
	stored := e.observe("agent.run.dd2")
	results := e.watch("dd1", "dd2")
	if err := e.publish("agent.run.dd1", "dedup-1", []byte(`{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.held:
	case <-time.After(30 * time.Second):
		t.Fatal("the first step never acked")
	}
	victim.kill()
	if !natstest.Poll(30*time.Second, func() bool { return results.flowsDone("dd2") == 1 }) {
		t.Fatal("the second step did not run")
	}
	if !natstest.Poll(60*time.Second, func() bool { ok, _ := e.consumerSettled("dd2"); return ok }) {
		t.Fatal("the second step's trigger was not acked")
	}
	// NATS restarts, gracefully.
	natsd.signal(syscall.SIGTERM)
	if err := natsd.wait(30 * time.Second); err != nil && !isExit(err) {
		t.Fatal(err)
	}
	natsd.start(t)
	// The first step's message comes back after its ack wait. Its job's record is final, so
	// the rescuer acknowledges it without running it; had the victim died before writing the
	// record, the rerun would publish the next step's trigger again, and the second step's
	// own record would stop it there. Either way the second step runs once.
	e.host(hostOpts{name: "dedup-rescuer", fnDir: firstFns, ackWait: ackWait})
	if !natstest.Poll(60*time.Second, func() bool { ok, _ := e.consumerSettled("dd1"); return ok }) {
		_, info := e.consumerSettled("dd1")
		t.Fatalf("the first step's redelivery was not settled after the restart: %s", info)
	}
	// The rerun acked after its outputs were stored: once the observer has seen everything the
	// stream stored, and the second step's consumer has settled, the counts are final.
	natstest.Poll(60*time.Second, func() bool {
		ok, _ := e.consumerSettled("dd2")
		return ok && e.observerSettled("agent.run.dd2") && results.flowsDone("dd2") == 1
	})
	t.Logf("first step ran to its end %d times; second step stored %d time(s), ran %d time(s)",
		results.reruns("dd1")+1, stored.count("dedup-1"), results.reruns("dd2")+1)
	if results.reruns("dd2") != 0 || results.flowsDone("dd2") != 1 {
		t.Errorf("after a NATS restart the second step ran %d times (its trigger stored %d times); want once",
			results.reruns("dd2")+1, stored.count("dedup-1"))
	}
}
