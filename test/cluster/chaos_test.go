package cluster_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// Two-step flows: step1 passes its payload on to step2 through `next:`.
const (
	step1Fn = "# sandbox\n# next: agent.run.step2\ncat\n"
	step2Fn = "# sandbox\ncat >/dev/null\necho \"{\\\"flow\\\":\\\"$FLOW_ID\\\",\\\"job\\\":\\\"$JOB_ID\\\"}\"\n"
)

// TestChaosRandomSIGKILLs publishes 500 two-step flows through two hosts and kills one of
// them with SIGKILL at random moments, several times, restarting it each time on the same
// data directory. Every accepted flow must finish (0 lost), and no step1 may trigger its step2
// twice (0 duplicate triggers), counted both as distinct step2 job ids per flow and as distinct
// step2 messages stored in the trigger stream per flow. Reruns of a job that had finished but
// not yet acked are allowed and counted.
func TestChaosRandomSIGKILLs(t *testing.T) {
	const (
		flows    = 500
		batches  = 25
		ackWait  = 3 * time.Second
		maxKills = 10
	)
	start := time.Now()
	dir := tempDir(t, "chaos-nats-")
	natsd := startNATS(t, dir, 0)
	e := newEnv(t, natsd.url())
	e.fn("step1.sh", step1Fn)
	e.fn("step2.sh", step2Fn)
	hosts := []*hostProc{e.host(hostOpts{name: "chaos-a", ackWait: ackWait}), e.host(hostOpts{name: "chaos-b", ackWait: ackWait})}
	results := e.watch("step1", "step2")
	stored := e.observe("agent.run.step2")

	seed := uint64(time.Now().UnixNano())
	t.Logf("chaos seed %d, ack wait %s, %d flows in %d batches", seed, ackWait, flows, batches)
	rng := rand.New(rand.NewPCG(seed, seed>>7))

	// The producer: 500 flows in paced batches, so that kills always find work in flight.
	var (
		mu       sync.Mutex
		accepted []string
		pubErrs  []string
	)
	published := make(chan struct{})
	go func() {
		defer close(published)
		for b := range batches {
			for i := range flows / batches {
				id := fmt.Sprintf("chaos-%03d-%02d", b, i)
				err := e.publish("agent.run.step1", id, fmt.Appendf(nil, `{"flow":%q}`, id))
				mu.Lock()
				if err != nil {
					pubErrs = append(pubErrs, err.Error())
				} else {
					accepted = append(accepted, id)
				}
				mu.Unlock()
			}
			time.Sleep(700 * time.Millisecond) // pacing the load, not waiting for anything
		}
	}()

	// The chaos: SIGKILL a random host at a random moment, leave it dead a random while, restart.
	type kill struct {
		host           string
		at, down       time.Duration
		inFlight       float64
		doneAtKill     int
		publishedByNow int
	}
	var kills []kill
	for len(kills) < maxKills && results.flowsDone("step2") < flows {
		// A random moment: short enough that the ~20 s of flows see six kills or more
		// whatever the seed (up to 2 s apart, a slow seed landed 5; 1 in many full runs).
		time.Sleep(time.Duration(300+rng.IntN(1000)) * time.Millisecond)
		if results.flowsDone("step2") >= flows {
			break
		}
		h := hosts[rng.IntN(len(hosts))]
		k := kill{host: h.o.name, inFlight: h.metric("host_runs_in_flight"), doneAtKill: results.flowsDone("step2")}
		mu.Lock()
		k.publishedByNow = len(accepted)
		mu.Unlock()
		k.at = h.kill().Sub(start)
		k.down = time.Duration(200+rng.IntN(1000)) * time.Millisecond
		time.Sleep(k.down) // the host stays dead this long: part of the fault
		h.start(t)
		kills = append(kills, k)
	}
	<-published
	mu.Lock()
	if len(pubErrs) > 0 {
		t.Errorf("%d flows could not be published: %v", len(pubErrs), pubErrs[:min(3, len(pubErrs))])
	}
	ids := append([]string(nil), accepted...)
	mu.Unlock()

	// Safety nets, not expectations: a thousand jailed runs on a loaded 2-core machine can take
	// minutes, and a flow still running when the wait gives up would be counted as lost.
	natstest.Poll(5*time.Minute, func() bool { return len(results.missing("step2", ids)) == 0 })
	elapsed := time.Since(start)
	natstest.Poll(2*time.Minute, func() bool {
		a, _ := e.consumerSettled("step1")
		b, _ := e.consumerSettled("step2")
		return a && b
	})

	// Count.
	lost := results.missing("step2", ids)
	var lostForGood []string
	if len(lost) > 0 {
		st := e.store()
		for _, f := range lost {
			recs, _ := st.List(e.ctx(30*time.Second), func(r *jobs.Record) bool { return r.FlowID == f && r.Function == "step2" })
			if len(recs) == 0 || recs[0].Status != jobtype.Succeeded {
				lostForGood = append(lostForGood, f)
			}
		}
	}
	splitStep2 := results.splitFlows("step2")
	doubleStored := stored.doubled()
	recs := e.records()
	attemptsOver1, byHost := 0, map[string]int{}
	for _, r := range recs {
		if r.Attempts > 1 {
			attemptsOver1++
		}
		byHost[r.Host]++
	}
	stale := 0
	for _, h := range hosts {
		ents, _ := os.ReadDir(filepath.Join(h.data, "run"))
		stale += len(ents)
	}
	for i, k := range kills {
		t.Logf("kill %d: %s at +%.1fs, %v runs in flight, %d/%d flows done, %d published; down %s",
			i+1, k.host, k.at.Seconds(), k.inFlight, k.doneAtKill, flows, k.publishedByNow, k.down.Round(time.Millisecond))
	}
	t.Logf("CHAOS: %d flows accepted, %d kills, %s total (%.1f flows/s); lost %d (%d without even a succeeded record), "+
		"duplicate next-step triggers %d (distinct step2 job ids) / %d (stored step2 messages); reruns step1 %d, step2 %d; "+
		"records with attempts > 1: %d; jobs by host %v; error events %d; job directories left in data/run after the kills: %d",
		len(ids), len(kills), elapsed.Round(time.Millisecond), float64(len(ids))/elapsed.Seconds(), len(lost), len(lostForGood),
		len(splitStep2), len(doubleStored), results.reruns("step1"), results.reruns("step2"), attemptsOver1, byHost,
		len(results.errorEvents()), stale)

	if len(kills) < 6 {
		t.Errorf("only %d kills landed while flows were in flight; the chaos did not happen as intended", len(kills))
	}
	if len(ids) != flows {
		t.Errorf("accepted %d flows, want %d", len(ids), flows)
	}
	if len(lost) > 0 {
		t.Errorf("LOST %d flows (no step2 result): %v", len(lost), lost[:min(10, len(lost))])
	}
	if len(splitStep2) > 0 {
		t.Errorf("DUPLICATE next-step triggers (a flow's step2 ran as several jobs): %v", splitStep2)
	}
	if len(doubleStored) > 0 {
		t.Errorf("DUPLICATE next-step triggers (step2 stored more than once for a flow): %v", doubleStored)
	}
	if stored.flows() != len(ids) {
		t.Errorf("the trigger stream stored step2 for %d flows, want %d", stored.flows(), len(ids))
	}
	if ev := results.errorEvents(); len(ev) > 0 {
		t.Errorf("%d error events, e.g. %s", len(ev), strings.Join(ev[:min(3, len(ev))], "\n"))
	}
	for _, fn := range []string{"step1", "step2"} {
		if ok, info := e.consumerSettled(fn); !ok {
			t.Errorf("messages left unsettled: %s", info)
		}
	}
}
