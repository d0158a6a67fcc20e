package cluster_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/secrets"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// TestSIGKILLAtEachPoint places a SIGKILL of the host running a flow's first step at each
// point the issue names, exactly rather than by chance: the host's NATS (or S3) connection goes
// through a proxy that freezes it at the chosen protocol operation, and the host is killed
// right then. A second host, started afterwards, must finish the flow; the first step's next
// step must be triggered exactly once.
func TestSIGKILLAtEachPoint(t *testing.T) {
	t.Parallel() // mostly waiting (ack waits, a dead run's volume lease)
	const ackWait = 2 * time.Second
	dir := tempDir(t, "kill-nats-")
	natsd := startNATS(t, dir, 0)
	s3 := startVersity(t, dir)
	e := newEnv(t, natsd.url())
	first := "# sandbox\n# next: agent.run.%s\necho started >&2\n%s\ncat\n"
	for _, c := range []struct{ name, extra string }{{"pre", ""}, {"mid", "sleep 2"}, {"ack", ""}} {
		e.fn(c.name+"1.sh", fmt.Sprintf(first, c.name+"2", c.extra))
		e.fn(c.name+"2.sh", step2Fn)
	}
	e.fn("up1.sh", `# sandbox
# volume: up-vol vol
# next: agent.run.up2
echo started >&2
for i in 1 2 3 4 5 6; do yes "$i $ARG_FLOW" | head -c 300000 > vol/data-$i; done
echo "$JOB_ID" >> vol/runs
cat
`)
	e.fn("up2.sh", step2Fn)
	results := e.watch("pre1", "pre2", "mid1", "mid2", "ack1", "ack2", "up1", "up2")
	lines := map[string]*logLines{}
	for _, fn := range []string{"pre1", "mid1", "ack1", "up1"} {
		lines[fn] = e.logs(fn)
	}

	// run drives one case: the victim host (through the given NATS and S3 addresses) takes the
	// flow, the hold fires (or, without a proxy, the trigger does), the victim dies, a rescuer
	// starts and must finish the flow.
	type victim struct {
		natsURL string
		s3Addr  string
		held    <-chan []byte // nil: killAt decides
		killAt  func() bool
	}
	run := func(t *testing.T, fn, flow string, v victim) (killedAt time.Time, rescuer *hostProc) {
		o := hostOpts{name: "victim-" + fn, natsURL: v.natsURL, ackWait: ackWait}
		s3cfg := s3.cfg
		if v.s3Addr != "" {
			s3cfg.Endpoint = v.s3Addr
		}
		o.s3 = &s3cfg
		vh := startHost(t, e.dir, e.defaults(o))
		stored := e.observe("agent.run." + fn + "2")
		if err := e.publish("agent.run."+fn+"1", flow, fmt.Appendf(nil, `{"flow":%q}`, flow)); err != nil {
			t.Fatal(err)
		}
		if v.held != nil {
			select {
			case unit := <-v.held:
				t.Logf("held %q", firstLine(unit))
			case <-time.After(30 * time.Second):
				t.Fatal("the proxy never saw the point to kill at")
			}
		} else if !natstest.Poll(30*time.Second, v.killAt) {
			t.Fatal("the moment to kill never came")
		}
		killedAt = vh.kill()
		rescuer = startHost(t, e.dir, e.defaults(hostOpts{name: "rescuer-" + fn, ackWait: ackWait, s3: &s3.cfg}))
		if !natstest.Poll(90*time.Second, func() bool { return len(results.missing(fn+"2", []string{flow})) == 0 }) {
			t.Fatalf("flow %s never finished after the kill", flow)
		}
		natstest.Poll(60*time.Second, func() bool { ok, _ := e.consumerSettled(fn + "1"); return ok })
		rec, err := e.store().Get(e.ctx(10*time.Second), flow)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: first step attempts %d, status %s, ran to its end %d times; \"started\" lines %d; second step stored %d time(s), run as %d job(s)",
			fn, rec.Attempts, rec.Status, results.reruns(fn+"1")+1, len(lines[fn+"1"].matching(flow, "started")),
			stored.count(flow), len(results.jobs(fn+"2", flow)))
		if rec.Status != jobtype.Succeeded {
			t.Errorf("first step record: %+v", rec)
		}
		if d := stored.doubled(); len(d) > 0 {
			t.Errorf("DUPLICATE next-step trigger: %v", d)
		}
		if s := results.splitFlows(fn + "2"); len(s) > 0 {
			t.Errorf("DUPLICATE next-step runs: %v", s)
		}
		if ok, info := e.consumerSettled(fn + "1"); !ok {
			t.Errorf("unsettled: %s", info)
		}
		return killedAt, rescuer
	}

	t.Run("before the run", func(t *testing.T) {
		// Freeze the victim's connection as the server delivers it the message: JetStream
		// counts it delivered, the host never gets to run it.
		p := startProxy(t, strings.TrimPrefix(natsd.url(), "nats://"), splitNATS, func(toServer bool, unit []byte) bool {
			op, subject, reply, _, ok := natsMsg(unit)
			return ok && !toServer && op == "HMSG" && subject == "agent.run.pre1" && strings.HasPrefix(reply, "$JS.ACK.")
		})
		run(t, "pre", "kill-pre", victim{natsURL: "nats://" + p.addr(), held: p.held})
		if n := len(lines["pre1"].matching("kill-pre", "started")); n != 1 {
			t.Errorf("the job started %d times; the victim should never have started it", n)
		}
	})

	t.Run("during the run", func(t *testing.T) {
		run(t, "mid", "kill-mid", victim{natsURL: natsd.url(), killAt: func() bool {
			return len(lines["mid1"].matching("kill-mid", "started")) > 0
		}})
		if n := len(lines["mid1"].matching("kill-mid", "started")); n != 2 {
			t.Errorf("the job started %d times, want 2 (killed once, then rerun)", n)
		}
	})

	t.Run("after the outputs, before the ack", func(t *testing.T) {
		// Freeze the victim's connection as it sends the +ACK, after its result and its next
		// step's trigger were published and confirmed.
		p := startProxy(t, strings.TrimPrefix(natsd.url(), "nats://"), splitNATS, func(toServer bool, unit []byte) bool {
			_, subject, _, body, ok := natsMsg(unit)
			return ok && toServer && strings.HasPrefix(subject, "$JS.ACK.AGENT_RUN.fn_ack1.") && bytes.HasPrefix(body, []byte("+ACK"))
		})
		run(t, "ack", "kill-ack", victim{natsURL: "nats://" + p.addr(), held: p.held})
		if n := len(results.jobs("ack1", "kill-ack")); n != 1 {
			t.Errorf("first step ran as %d jobs", n)
		}
		// The redelivered trigger belongs to a job whose record is final: it is acknowledged
		// from the record, not run a second time.
		if n := results.reruns("ack1"); n != 0 {
			t.Errorf("the first step ran to its end %d times; its record said it was done", n+1)
		}
	})

	t.Run("during the volume upload", func(t *testing.T) {
		// A first flow makes version 1 of the volume, then the victim's upload of the second
		// run's files is frozen at its first blob, and the victim is killed.
		p := startProxy(t, s3.addr, splitLines, func(toServer bool, unit []byte) bool {
			return toServer && bytes.Contains(unit, []byte("PUT ")) && bytes.Contains(unit, []byte("/volumes/up-vol/blobs/"))
		})
		p.armed.Store(false)
		seed := startHost(t, e.dir, e.defaults(hostOpts{name: "seed-up", ackWait: ackWait, s3: &s3.cfg}))
		if err := e.publish("agent.run.up1", "up-seed", []byte(`{"flow":"up-seed"}`)); err != nil {
			t.Fatal(err)
		}
		if !natstest.Poll(60*time.Second, func() bool { return len(results.missing("up2", []string{"up-seed"})) == 0 }) {
			t.Fatal("the seed flow did not finish")
		}
		seed.kill()
		p.armed.Store(true)
		vols := e.volumes(&s3.cfg, 1)
		killedAt, _ := run(t, "up", "kill-up", victim{natsURL: natsd.url(), s3Addr: p.addr(), held: p.held})
		ctx := e.ctx(time.Minute)
		rec, _ := e.store().Get(ctx, "kill-up")
		runs, err := readVolume(ctx, vols, "up-vol", "runs")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("volume up-vol: version %d, runs %q; the rerun was delivered %s after the kill and finished %s after it (it waits for the dead run's volume lease to expire)",
			latestVersion(ctx, vols, "up-vol"), runs, rec.Started.Sub(killedAt).Round(time.Millisecond), rec.Finished.Sub(killedAt).Round(time.Millisecond))
		if got := strings.Fields(runs); len(got) != 2 || got[1] != "kill-up" || latestVersion(ctx, vols, "up-vol") != 2 {
			t.Errorf("volume up-vol after the killed upload and its rerun: version %d, runs %q; want version 2 with two committed runs",
				latestVersion(ctx, vols, "up-vol"), runs)
		}
		for i := 1; i <= 6; i++ {
			got, err := readVolume(ctx, vols, "up-vol", fmt.Sprintf("data-%d", i))
			want := strings.Repeat(fmt.Sprintf("%d kill-up\n", i), 300000/len(fmt.Sprintf("%d kill-up\n", i))+1)[:300000]
			if err != nil || got != want {
				t.Errorf("data-%d: %d bytes, err %v; not the rerun's whole file", i, len(got), err)
			}
		}
	})
}

func firstLine(b []byte) string {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}

// TestRestartAfterSIGKILLLeavesNoScratchBehind kills a host while a job runs whose arguments
// carry a resolved secret, restarts it on the same data directory, and looks for what the
// killed run left there: its job directory, and in it the arguments file holding the secret's
// value in clear text.
func TestRestartAfterSIGKILLLeavesNoScratchBehind(t *testing.T) {
	t.Parallel()
	dir := tempDir(t, "scratch-nats-")
	natsd := startNATS(t, dir, 0)
	e := newEnv(t, natsd.url())
	e.fn("uses.sh", "# sandbox\n# secrets: token\necho started >&2\nsleep 5\necho '\"done\"'\n")
	h := e.host(hostOpts{name: "scratch-a", ackWait: 2 * time.Second})
	key, err := secrets.LoadKey(e.keyFile, false)
	if err != nil {
		t.Fatal(err)
	}
	st, err := secrets.Bind(e.ctx(10*time.Second), e.js, key)
	if err != nil {
		t.Fatal(err)
	}
	const value = "s3cr3t-never-on-disk"
	if err := st.Set(e.ctx(10*time.Second), "token", []byte(`"`+value+`"`)); err != nil {
		t.Fatal(err)
	}
	lines := e.logs("uses")
	if err := e.publish("agent.run.uses", "scratch-1", []byte(`{"token":"$secret:token"}`)); err != nil {
		t.Fatal(err)
	}
	if len(lines.waitCount(30*time.Second, "scratch-1", "started", 1)) == 0 {
		t.Fatal("the job never started")
	}
	h.kill()
	runDir := filepath.Join(h.data, "run")
	killed := map[string]bool{} // what the killed run left, as it died
	ents, _ := os.ReadDir(runDir)
	for _, d := range ents {
		killed[d.Name()] = true
	}
	h.start(t)
	if _, err := e.store().WaitFinal(e.ctx(60*time.Second), "scratch-1"); err != nil {
		t.Fatal(err)
	}
	// The rerun has finished and its directory is removed in the background; the host may clean
	// up after the killed run in the background too. Whatever of the killed run's is still there
	// after a while stays.
	var names []string
	natstest.Poll(60*time.Second, func() bool {
		ents, _ := os.ReadDir(runDir)
		return len(ents) == 0
	})
	ents, _ = os.ReadDir(runDir)
	for _, d := range ents {
		if killed[d.Name()] {
			names = append(names, d.Name())
		}
	}
	var withSecret []string
	filepath.WalkDir(h.data, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(value)) {
				withSecret = append(withSecret, p)
			}
		}
		return nil
	})
	t.Logf("after the restart: data/run holds %v; files holding the secret's value: %v", names, withSecret)
	if len(names) > 0 {
		t.Errorf("BUG: a restarted host keeps the job directories of runs killed with it (%v): data/run grows with every crash", names)
	}
	if len(withSecret) > 0 {
		t.Errorf("BUG: a resolved secret stays on disk in clear text after a crash: %v", withSecret)
	}
}
