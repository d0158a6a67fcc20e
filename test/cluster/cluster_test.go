package cluster_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// TestScaleOutThreeNodeCluster runs a 3-node NATS cluster (three nats-server processes with
// routes on loopback, JetStream everywhere), three hosts each connected to a different node
// with --replicas 3, and an S3 store for volumes. It pushes 300 two-step flows whose second
// step appends to one of eight shared volumes, kills one NATS node and one host with SIGKILL
// while they run, and checks that every flow completed once, that the work was spread over the
// hosts, that every stream and bucket is R3, and that the volumes are intact: each version
// added exactly one whole line, and every flow's line is there.
func TestScaleOutThreeNodeCluster(t *testing.T) {
	const (
		flows   = 300
		batches = 15
		buckets = 8
		ackWait = 5 * time.Second
	)
	start := time.Now()
	dir := tempDir(t, "cluster-nats-")
	nodes := startCluster(t, dir, 3)
	s3 := startVersity(t, dir)
	e := newEnv(t, nodes[0].url()) // the test's client stays on n1, which is not killed
	waitJetStreamCluster(t, e)
	e.fn("step1.sh", step1Fn)
	e.fn("step2.sh", `# sandbox
# volume: bucket-$args[b] vol
echo "$FLOW_ID $JOB_ID" >> vol/log
echo "{\"flow\":\"$FLOW_ID\"}"
`)
	hosts := map[string]*hostProc{}
	for i, name := range []string{"host-a", "host-b", "host-c"} {
		hosts[name] = e.host(hostOpts{name: name, natsURL: nodes[i].url(), ackWait: ackWait, replicas: 3, s3: &s3.cfg})
	}
	results := e.watch("step1", "step2")
	stored := e.observe("agent.run.step2")
	t.Logf("cluster, S3 and three hosts up in %s", time.Since(start).Round(time.Millisecond))

	bucketOf := map[string]string{}
	var ids []string
	var events []string
	load := time.Now()
	for b := range batches {
		for i := range flows / batches {
			id := fmt.Sprintf("cl-%02d-%02d", b, i)
			bucket := fmt.Sprintf("%d", len(ids)%buckets)
			if err := e.publish("agent.run.step1", id, fmt.Appendf(nil, `{"flow":%q,"b":%q}`, id, bucket)); err != nil {
				t.Errorf("flow %s not accepted: %v", id, err)
				continue
			}
			ids = append(ids, id)
			bucketOf[id] = "bucket-" + bucket
		}
		switch b {
		case batches / 3:
			nodes[1].kill()
			events = append(events, fmt.Sprintf("SIGKILL nats node n2 (host-b's node) at +%.1fs, %d/%d flows done", time.Since(load).Seconds(), results.flowsDone("step2"), flows))
		case 2 * batches / 3:
			hosts["host-c"].kill()
			events = append(events, fmt.Sprintf("SIGKILL host-c at +%.1fs, %d/%d flows done", time.Since(load).Seconds(), results.flowsDone("step2"), flows))
		}
		time.Sleep(500 * time.Millisecond) // pacing the load
	}
	for _, ev := range events {
		t.Log(ev)
	}

	// Done: a step2 result, or (a result event can die with the node that carried it) a
	// succeeded step2 record.
	done := func() []string {
		missing := results.missing("step2", ids)
		if len(missing) == 0 {
			return nil
		}
		st, err := jobs.Bind(context.Background(), e.js)
		if err != nil {
			return missing
		}
		recs, err := st.List(e.ctx(30*time.Second), func(r *jobs.Record) bool { return r.Function == "step2" && r.Status == jobtype.Succeeded })
		if err != nil {
			return missing
		}
		ok := map[string]bool{}
		for _, r := range recs {
			ok[r.FlowID] = true
		}
		var still []string
		for _, f := range missing {
			if !ok[f] {
				still = append(still, f)
			}
		}
		return still
	}
	// A safety net, not an expectation: a flow still running when the wait gives up would be
	// counted as lost.
	natstest.Poll(5*time.Minute, func() bool { return len(results.missing("step2", ids)) == 0 })
	lost := done()
	elapsed := time.Since(load)

	recs := e.records()
	byHost := map[string]map[string]int{}
	attempts := 0
	for _, r := range recs {
		if byHost[r.Host] == nil {
			byHost[r.Host] = map[string]int{}
		}
		byHost[r.Host][r.Function]++
		if r.Attempts > 1 {
			attempts++
		}
	}
	t.Logf("SCALE-OUT: %d flows accepted, finished in %s (%.1f flows/s) with one node and one host killed; lost %d; "+
		"duplicate next-step triggers %d (job ids) / %d (stored); reruns step1 %d, step2 %d; results seen only as records %d; "+
		"records with attempts > 1: %d; jobs by host %v; error events %d",
		len(ids), elapsed.Round(time.Millisecond), float64(len(ids))/elapsed.Seconds(), len(lost),
		len(results.splitFlows("step2")), len(stored.doubled()), results.reruns("step1"), results.reruns("step2"),
		len(results.missing("step2", ids)), attempts, byHost, len(results.errorEvents()))
	if len(ids) != flows {
		t.Errorf("accepted %d flows, want %d", len(ids), flows)
	}
	if len(lost) > 0 {
		t.Errorf("LOST %d flows: %v", len(lost), lost[:min(10, len(lost))])
	}
	if s := results.splitFlows("step2"); len(s) > 0 {
		t.Errorf("DUPLICATE next-step triggers: %v", s)
	}
	if d := stored.doubled(); len(d) > 0 {
		t.Errorf("DUPLICATE next-step triggers stored: %v", d)
	}
	if ev := results.errorEvents(); len(ev) > 0 {
		t.Errorf("%d error events: %v", len(ev), ev[:min(3, len(ev))])
	}
	for _, name := range []string{"host-a", "host-b", "host-c"} {
		if byHost[name]["step1"]+byHost[name]["step2"] == 0 {
			t.Errorf("%s ran no job: the work was not spread", name)
		}
	}

	// Every stream and bucket the hosts keep is replicated three times.
	checkR3 := func(when string) {
		t.Helper()
		ctx := e.ctx(30 * time.Second)
		var got []string
		for _, name := range []string{"AGENT_RUN", "AGENT_LOGS", "AGENT_DEAD", "KV_agent_jobs", "KV_agent_functions", "KV_agent_secrets",
			"KV_agent_volume_heads", "KV_agent_volume_leases", "KV_agent_volume_staged"} {
			s, err := e.js.Stream(ctx, name)
			if err != nil {
				t.Errorf("%s: stream %s: %v", when, name, err)
				continue
			}
			r := s.CachedInfo().Config.Replicas
			got = append(got, fmt.Sprintf("%s=R%d", name, r))
			if r != 3 {
				t.Errorf("%s: stream %s has %d replicas, want 3", when, name, r)
			}
		}
		t.Logf("%s: %s", when, strings.Join(got, " "))
	}
	checkR3("after the run")

	// The volumes: in each, version N holds exactly N lines, whole, one per committed run,
	// and every flow of the bucket is there.
	vols := e.volumes(&s3.cfg, 3)
	ctx := e.ctx(2 * time.Minute)
	perBucket := map[string][]string{}
	for _, id := range ids {
		perBucket[bucketOf[id]] = append(perBucket[bucketOf[id]], id)
	}
	names := keys(perBucket)
	sort.Strings(names)
	committedTwice := 0
	var summary []string
	for _, name := range names {
		content, err := readVolume(ctx, vols, name, "log")
		if err != nil {
			t.Errorf("volume %s: %v", name, err)
			continue
		}
		version := latestVersion(ctx, vols, name)
		lines := strings.Split(strings.TrimSuffix(content, "\n"), "\n")
		seen := map[string]int{}
		for _, l := range lines {
			f := strings.Fields(l)
			if len(f) != 2 || bucketOf[f[0]] != name {
				t.Errorf("volume %s: malformed or misplaced line %q", name, l)
				continue
			}
			seen[f[0]]++
		}
		for _, id := range perBucket[name] {
			switch seen[id] {
			case 0:
				t.Errorf("volume %s: flow %s is missing", name, id)
			case 1:
			default:
				committedTwice++ // a run that committed, then died before its ack, and ran again
			}
		}
		if uint64(len(lines)) != version || !strings.HasSuffix(content, "\n") {
			t.Errorf("volume %s: version %d holds %d lines; every commit must add exactly one whole line", name, version, len(lines))
		}
		summary = append(summary, fmt.Sprintf("%s v%d/%d lines", name, version, len(lines)))
	}
	t.Logf("volumes: %s; flows committed twice (rerun after commit): %d", strings.Join(summary, ", "), committedTwice)

}

// TestVolumesCLIKeepsClusterReplication reads a volume with `host volumes ls` and `host volumes
// get`, as a user would, on a 3-node cluster whose hosts keep everything at R3: the read must
// agree with the store, and must not change the replication of the volume buckets.
func TestVolumesCLIKeepsClusterReplication(t *testing.T) {
	dir := tempDir(t, "cli-nats-")
	nodes := startCluster(t, dir, 3)
	e := newEnv(t, nodes[0].url())
	waitJetStreamCluster(t, e)
	e.fn("note.sh", "# sandbox\n# volume: notes vol\necho \"$JOB_ID\" >> vol/log\necho '\"ok\"'\n")
	e.host(hostOpts{name: "cli-a", replicas: 3})
	if err := e.publish("agent.run.note", "cli-1", nil); err != nil {
		t.Fatal(err)
	}
	if r, err := e.store().WaitFinal(e.ctx(60*time.Second), "cli-1"); err != nil || r.Status != jobtype.Succeeded {
		t.Fatalf("%v %+v", err, r)
	}
	replicas := func() string {
		ctx := e.ctx(30 * time.Second)
		var got []string
		for _, name := range []string{"KV_agent_volume_heads", "KV_agent_volume_leases", "KV_agent_volume_staged", "OBJ_agent_volumes"} {
			s, err := e.js.Stream(ctx, name)
			if err != nil {
				got = append(got, name+"="+err.Error())
				continue
			}
			got = append(got, fmt.Sprintf("%s=R%d", name, s.CachedInfo().Config.Replicas))
		}
		return strings.Join(got, " ")
	}
	before := replicas()
	ls, lsErr := runCLI(t, "volumes", "ls", "--nats", nodes[0].url())
	get, getErr := runCLI(t, "volumes", "get", "notes", "log", "--nats", nodes[0].url())
	after := replicas()
	t.Logf("before the CLI: %s; `host volumes ls` said %q, `get notes log` %q; after: %s", before, ls, get, after)
	// `volumes ls` is a table: a header, then one row per volume, its name first.
	rows := strings.Split(strings.TrimSpace(ls), "\n")
	if lsErr != nil || getErr != nil || len(rows) != 2 || strings.Fields(rows[1])[0] != "notes" || get != "cli-1\n" {
		t.Errorf("host volumes ls/get: %v %v: %q %q", lsErr, getErr, ls, get)
	}
	if before != after {
		t.Errorf("BUG: reading volumes with the CLI changed the cluster's replication: before %s, after %s", before, after)
	}
}

// waitJetStreamCluster waits until the cluster has a JetStream meta leader and can place an R3
// stream.
func waitJetStreamCluster(t *testing.T, e *env) {
	t.Helper()
	var last error
	if !natstest.Poll(60*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, last = e.js.CreateStream(ctx, jetstream.StreamConfig{Name: "TEST_READY", Subjects: []string{"test.ready"}, Replicas: 3})
		if last != nil {
			return false
		}
		_ = e.js.DeleteStream(ctx, "TEST_READY")
		return true
	}) {
		t.Fatalf("the cluster never placed an R3 stream: %v", last)
	}
}
