package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/objstore"
	"github.com/agenthost/host/internal/schedule"
	"github.com/agenthost/host/internal/secrets"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// TestClockSkewBetweenHosts checks that schedules and volume leases do not depend on the
// hosts' wall clocks agreeing.
//
// A process's wall clock cannot be shifted on its own here (Go reads the clock through the
// vDSO, so LD_PRELOAD fakers do not apply, and time namespaces do not offset CLOCK_REALTIME),
// and shifting the machine's clock would disturb everything else on it. So the skewed hosts
// are simulated: for schedules, two publishers in this test whose clocks run 2.6 s ahead and
// 1.3 s behind do exactly what a host's scheduler does on its clock (schedule.Next, then the
// trigger with schedule.MsgID), next to a real host serving the same scheduled function. For
// leases, the test checks what a lease is made of while a real run holds one: no timestamps
// in the entry, expiry by the NATS server's own age limit.
func TestClockSkewBetweenHosts(t *testing.T) {
	t.Parallel()
	dir := tempDir(t, "skew-nats-")
	natsd := startNATS(t, dir, 0)
	e := newEnv(t, natsd.url())
	e.fn("tick.sh", "# sandbox\n# schedule: @every 1s\necho \"\\\"$JOB_ID\\\"\"\n")
	e.fn("hold.sh", "# sandbox\n# volume: skewed vol\necho started >&2\nsleep 3\necho x >> vol/x\necho '\"held\"'\n")
	e.host(hostOpts{name: "skew-real"})

	t.Run("schedules", func(t *testing.T) {
		var mu sync.Mutex
		runs := map[string]int{}
		sub, err := e.nc.Subscribe(bus.ResultSubject("tick"), func(m *nats.Msg) {
			mu.Lock()
			runs[m.Header.Get(bus.HeaderJobID)]++
			mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		sched, err := annot.ParseSchedule("@every 1s")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
		defer cancel()
		// The skewed hosts share the real one's host key, so they derive the same tick ids.
		key, err := secrets.LoadKey(e.keyFile, false)
		if err != nil {
			t.Fatal(err)
		}
		tickIDs := ids.NewKey(key)
		var wg sync.WaitGroup
		published := map[time.Duration][]string{}
		for _, skew := range []time.Duration{2600 * time.Millisecond, -1300 * time.Millisecond} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// A host whose clock reads now+skew: it fires each tick when its own clock says so.
				for {
					tick := schedule.Next(sched, time.Now().Add(skew))
					select {
					case <-ctx.Done():
						return
					case <-time.After(time.Until(tick.Add(-skew))):
					}
					m := nats.NewMsg(bus.RunSubject("tick"))
					m.Data = []byte("{}")
					m.Header.Set(bus.HeaderMsgID, tickIDs.Tick("tick", tick))
					m.Header.Set(bus.HeaderScheduledAt, tick.UTC().Format(time.RFC3339))
					if _, err := e.js.PublishMsg(ctx, m); err == nil {
						mu.Lock()
						published[skew] = append(published[skew], m.Header.Get(bus.HeaderMsgID))
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		// Every tick the skewed hosts sent has run (the real host's ticks are counted as they come).
		natstest.Poll(60*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, ids := range published {
				for _, id := range ids {
					if runs[id] == 0 {
						return false
					}
				}
			}
			return true
		})
		mu.Lock()
		defer mu.Unlock()
		twice, both := 0, 0
		for _, n := range runs {
			if n > 1 {
				twice++
			}
		}
		ahead, behind := published[2600*time.Millisecond], published[-1300*time.Millisecond]
		for _, id := range ahead {
			if slices.Contains(behind, id) {
				both++ // the same tick, sent 3.9 s apart by the two skewed hosts (and by the real one)
			}
		}
		t.Logf("6 s of '@every 1s' on a real host plus hosts 2.6 s ahead and 1.3 s behind (%d and %d triggers sent, %d ticks sent by both): %d distinct ticks ran, %d ran more than once",
			len(ahead), len(behind), both, len(runs), twice)
		if twice > 0 {
			t.Errorf("%d ticks ran more than once with skewed clocks: %v", twice, runs)
		}
		if both == 0 {
			t.Error("the skewed hosts never sent the same tick; the test did not exercise skew")
		}
		for _, id := range slices.Concat(ahead, behind) {
			if runs[id] != 1 {
				t.Errorf("tick %s sent by a skewed host ran %d times", id, runs[id])
			}
		}
	})

	t.Run("leases", func(t *testing.T) {
		lines := e.logs("hold")
		if err := e.publish("agent.run.hold", "skew-hold", nil); err != nil {
			t.Fatal(err)
		}
		if len(lines.waitCount(30*time.Second, "skew-hold", "started", 1)) == 0 {
			t.Fatal("the run never started")
		}
		kv, err := e.js.KeyValue(e.ctx(10*time.Second), objstore.LeasesBucket)
		if err != nil {
			t.Fatal(err)
		}
		st, err := kv.Status(e.ctx(10 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		keys, err := kv.Keys(e.ctx(10 * time.Second))
		if err != nil || len(keys) != 1 {
			t.Fatalf("lease keys while a run holds one: %v %v", keys, err)
		}
		entry, err := kv.Get(e.ctx(10*time.Second), keys[0])
		if err != nil {
			t.Fatal(err)
		}
		var fields map[string]any
		if err := json.Unmarshal(entry.Value(), &fields); err != nil {
			t.Fatal(err)
		}
		t.Logf("a held lease: %s; bucket age limit (server-side TTL) %s", entry.Value(), st.TTL())
		for k := range fields {
			if !slices.Contains([]string{"holder", "host", "nonce"}, k) {
				t.Errorf("the lease entry carries %q (%v): a field another host might compare with its own clock", k, fields[k])
			}
		}
		if st.TTL() <= 0 {
			t.Error("the lease bucket has no server-side age limit: expiry would have to come from hosts' clocks")
		}
		// Another host, whatever its clock says, cannot take the lease while it is renewed.
		if _, err := kv.Create(e.ctx(10*time.Second), keys[0], []byte(`{"holder":"skewed-host"}`)); err == nil {
			t.Error("a second holder took a held lease")
		} else if !errors.Is(err, jetstream.ErrKeyExists) {
			t.Errorf("taking a held lease: %v", err)
		}
		if r, err := e.store().WaitFinal(e.ctx(60*time.Second), "skew-hold"); err != nil || string(r.Result) != `"held"` {
			t.Errorf("the lease holder's run: %v %+v", err, r)
		}
	})
}
