package cluster_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/secrets"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// The partition tests (TestPartitions): a 3-node NATS cluster (R3) with a host beside each
// node, each node and its host in a network namespace of their own (a "site", see lab), and
// two-step flows running through them whose second step appends to one of a few shared volumes
// while the network splits, heals, and processes die.

const (
	// partFlows is how many flows TestPartitions runs, a third (1,000) in each of its parts.
	partFlows = 3000
	// partLoadTime is how long the flows take to publish, at a steady rate: long enough that
	// the load goes on for a while after the longest fault (a 30 s cut at a fifth of it).
	// Each part publishes its third of the flows over this time.
	partLoadTime = 50 * time.Second
	// partAckWait is the hosts' ack wait: how long a message a cut-off host holds stays its own.
	partAckWait = 10 * time.Second
	// partVolumes is how many volumes the second steps share (flow i writes volume i % n).
	partVolumes = 8
	// partPort and partRoutePort are every node's client and route ports: each node is alone
	// in its namespace, so the ports are the same everywhere.
	partPort      = 4222
	partRoutePort = 6222
	partHTTPPort  = 8080
)

// partStep1 passes its payload on; partStep2 appends the flow to its volume's log and names it
// in the volume's `last` file, in the same commit: a version whose `last` is not its log's last
// line mixes two commits' files.
const (
	partStep1 = "# sandbox\n# next: agent.run.pstep2\ncat\n"
	partStep2 = `# sandbox
# volume: pvol-$args[b] vol
echo "$FLOW_ID $JOB_ID" >> vol/log
echo "$FLOW_ID" > vol/last
echo "{\"flow\":\"$FLOW_ID\"}"
`
)

// site is a NATS node and the host beside it, in one namespace.
type site struct {
	i    int // 1-based
	ns   *netns
	node *proc
	host *hostProc
}

func (s *site) hostName() string { return fmt.Sprintf("part-h%d", s.i) }

// partWorld is one partition test's cluster: the lab, the sites, and the test's own client,
// which sits in the lab's client namespace and talks to node 1 only (the tests never cut or
// kill site 1's node).
type partWorld struct {
	t     *testing.T
	lab   *lab
	e     *env
	sites []*site
	token string
	web   *http.Client
}

func newPartWorld(t *testing.T) *partWorld {
	t.Helper()
	requireJail(t)
	start := time.Now()
	w := &partWorld{t: t, lab: newLab(t, 3)}
	dir := tempDir(t, "partition-")
	var routes []string
	for _, n := range w.lab.sites {
		routes = append(routes, fmt.Sprintf("nats-route://%s:%d", n.addr, partRoutePort))
	}
	for i, n := range w.lab.sites {
		s := &site{i: i + 1, ns: n}
		conf := filepath.Join(dir, fmt.Sprintf("n%d.conf", s.i))
		writeFile(t, conf, fmt.Sprintf("server_name: n%d\nlisten: 0.0.0.0:%d\njetstream { store_dir: %q }\n"+
			"cluster { name: partc\n listen: 0.0.0.0:%d\n routes: [%s]\n"+
			// nats.conf's cluster block: a node cut off without a word is dropped in seconds.
			" ping_interval: \"3s\"\n ping_max: 2\n write_deadline: \"3s\"\n}\n",
			s.i, partPort, filepath.Join(dir, fmt.Sprintf("n%d-store", s.i)), partRoutePort, strings.Join(routes, ", ")))
		s.node = newProc(t, fmt.Sprintf("nats-n%d", s.i), filepath.Join(dir, fmt.Sprintf("n%d.log", s.i)), n.command(natsBin, "-c", conf)...)
		s.node.start()
		w.sites = append(w.sites, s)
	}
	for _, s := range w.sites {
		w.waitNode(s)
	}
	w.e = w.newEnv(dir)
	waitJetStreamCluster(t, w.e)
	w.e.fn("pstep1.sh", partStep1)
	w.e.fn("pstep2.sh", partStep2)

	// The hosts serve HTTP on their site's bridge address, which the web guard opens only
	// with a token.
	tokenFile := filepath.Join(dir, "keys", "http.token")
	w.token = "partition-test-token-0123456789abcdef"
	writeFile(t, tokenFile, w.token)
	if err := os.Chmod(tokenFile, 0o600); err != nil {
		t.Fatal(err)
	}
	w.web = w.lab.ctl.httpClient(2 * time.Second)
	for _, s := range w.sites {
		addr := fmt.Sprintf("%s:%d", s.ns.addr, partHTTPPort)
		h := newHost(t, dir, w.e.defaults(hostOpts{name: s.hostName(), natsURL: fmt.Sprintf("nats://127.0.0.1:%d", partPort),
			ackWait: partAckWait, replicas: 3, extra: []string{"--http", addr, "--http-token-file", tokenFile}}))
		h.http = addr
		h.proc.args = s.ns.command(h.proc.args...)
		s.host = h
		w.startHost(s)
	}
	t.Logf("lab, 3-node cluster and 3 hosts up in %s", time.Since(start).Round(time.Millisecond))
	return w
}

// waitNode waits until a node takes connections, dialed from the test's namespace.
func (w *partWorld) waitNode(s *site) {
	w.t.Helper()
	ok := natstest.Poll(20*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		c, err := w.lab.ctl.dial(ctx, "tcp", fmt.Sprintf("%s:%d", s.ns.addr, partPort))
		if err != nil {
			return !s.node.running()
		}
		c.Close()
		return true
	})
	if !ok || !s.node.running() {
		w.t.Fatalf("nats node n%d did not start:\n%s", s.i, tail(s.node.logPath, 30))
	}
}

// newEnv is newEnv's world with the test's connection made from inside the lab.
func (w *partWorld) newEnv(dir string) *env {
	t := w.t
	e := &env{t: t, dir: dir, url: fmt.Sprintf("nats://%s:%d", w.sites[0].ns.addr, partPort)}
	e.fnDir = filepath.Join(dir, "functions")
	e.keyFile = filepath.Join(dir, "keys", "secrets.key")
	if _, err := secrets.LoadKey(e.keyFile, true); err != nil {
		t.Fatal(err)
	}
	var err error
	e.nc, err = nats.Connect(e.url, nats.Name("test-client"), nats.SetCustomDialer(natsDialer{n: w.lab.ctl, timeout: 2 * time.Second}),
		nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.RetryOnFailedConnect(true), nats.ReconnectBufSize(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.nc.Close)
	if e.js, err = jetstream.New(e.nc); err != nil {
		t.Fatal(err)
	}
	return e
}

// startHost (re)starts a site's host and waits until its /healthz says it takes jobs.
func (w *partWorld) startHost(s *site) {
	w.t.Helper()
	s.host.proc.start()
	if !natstest.Poll(60*time.Second, func() bool { return !s.host.running() || w.healthy(s) }) || !s.host.running() {
		w.t.Fatalf("host %s did not become ready (exit: %v):\n%s", s.hostName(), s.host.wait(time.Second), tail(s.host.logPath, 40))
	}
}

func (w *partWorld) healthy(s *site) bool {
	req, err := http.NewRequest(http.MethodGet, "http://"+s.host.http+"/healthz", nil)
	if err != nil {
		return false
	}
	req.Header.Set("Authorization", "Bearer "+w.token)
	resp, err := w.web.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// load publishes n flows in paced batches from a goroutine, and returns a function that waits
// for the last and returns the accepted flow ids and which volume each writes.
type partLoad struct {
	mu       sync.Mutex
	accepted []string
	volumeOf map[string]string
	errs     []string
	done     chan struct{}
}

func (w *partWorld) load(prefix string, n int, over time.Duration) *partLoad {
	l := &partLoad{volumeOf: map[string]string{}, done: make(chan struct{})}
	seconds := int(over / time.Second)
	go func() {
		defer close(l.done)
		start := time.Now()
		for i := range n {
			// Flow i is due at i/n of the way: a steady rate, so that the fault and the heal
			// both find work arriving.
			time.Sleep(time.Until(start.Add(over * time.Duration(i) / time.Duration(n))))
			id := fmt.Sprintf("%s-%03d-%04d", prefix, i*seconds/n, i)
			vol := fmt.Sprintf("%d", i%partVolumes)
			err := w.e.publish("agent.run.pstep1", id, fmt.Appendf(nil, `{"flow":%q,"b":%q}`, id, vol))
			l.mu.Lock()
			if err != nil {
				l.errs = append(l.errs, err.Error())
			} else {
				l.accepted = append(l.accepted, id)
				l.volumeOf[id] = "pvol-" + vol
			}
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *partLoad) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.accepted)
}

// wait waits for every flow to be published and returns them.
func (l *partLoad) wait(t *testing.T) []string {
	t.Helper()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) > 0 {
		t.Errorf("%d flows could not be published: %v", len(l.errs), l.errs[:min(3, len(l.errs))])
	}
	return append([]string(nil), l.accepted...)
}

// stepRecords are the job records of a run, by flow and step.
type stepRecords map[string]map[string][]*jobs.Record

func (w *partWorld) stepRecords() stepRecords {
	out := stepRecords{}
	for _, r := range w.e.records() {
		if out[r.FlowID] == nil {
			out[r.FlowID] = map[string][]*jobs.Record{}
		}
		out[r.FlowID][r.Function] = append(out[r.FlowID][r.Function], r)
	}
	return out
}

// unfinished returns the flows whose second step has no succeeded record.
func (r stepRecords) unfinished(flows []string) []string {
	var out []string
	for _, f := range flows {
		done := false
		for _, rec := range r[f]["pstep2"] {
			done = done || rec.Status == jobtype.Succeeded
		}
		if !done {
			out = append(out, f)
		}
	}
	return out
}

// waitFlows waits (a safety net, not an expectation) until every flow's second step has
// succeeded and both consumers have settled, and returns when the last flow finished.
func (w *partWorld) waitFlows(flows []string, within time.Duration) time.Time {
	w.t.Helper()
	var last []string
	natstest.Poll(within, func() bool {
		last = w.stepRecords().unfinished(flows)
		return len(last) == 0
	})
	finished := time.Now()
	natstest.Poll(2*time.Minute, func() bool {
		a, _ := w.e.consumerSettled("pstep1")
		b, _ := w.e.consumerSettled("pstep2")
		return a && b
	})
	return finished
}

// partFigures are what a partition test reports and asserts.
type partFigures struct {
	flows, lost, dupRecords, dupResults, reruns, committedTwice int
	resultsFrom                                                 string
	missingResults                                              int
}

// check asserts exactly-once in effect over the flows and returns the figures: one succeeded
// record per step of every flow, one result per job, every volume at a committed version
// whose files come from one commit.
func (w *partWorld) check(flows, all []string, volumeOf map[string]string, results *flowLog) partFigures {
	t := w.t
	t.Helper()
	f := partFigures{flows: len(flows)}
	recs := w.stepRecords()
	var lost, dup []string
	jobsOf := map[string]map[string]bool{} // step → job ids, of this part's flows
	allSteps2 := map[string]bool{}         // every second step's job id so far
	for _, flow := range all {
		for _, r := range recs[flow]["pstep2"] {
			allSteps2[r.ID] = true
		}
	}
	for _, flow := range flows {
		for _, step := range []string{"pstep1", "pstep2"} {
			rs := recs[flow][step]
			switch {
			case len(rs) == 0:
				lost = append(lost, flow+"/"+step)
			case len(rs) > 1:
				var ids []string
				for _, r := range rs {
					ids = append(ids, r.ID)
				}
				dup = append(dup, fmt.Sprintf("%s/%s: %v", flow, step, ids))
			case rs[0].Status != jobtype.Succeeded:
				lost = append(lost, fmt.Sprintf("%s/%s (%s: %s)", flow, step, rs[0].Status, rs[0].Error))
			}
			for _, r := range rs {
				if jobsOf[step] == nil {
					jobsOf[step] = map[string]bool{}
				}
				jobsOf[step][r.ID] = true
			}
		}
	}
	f.lost, f.dupRecords = len(lost), len(dup)
	if len(lost) > 0 {
		t.Errorf("LOST %d steps (no succeeded record): %v", len(lost), lost[:min(10, len(lost))])
	}
	if len(dup) > 0 {
		t.Errorf("DUPLICATE records (a step ran as several jobs): %v", dup[:min(10, len(dup))])
	}

	// One result per job, on the results stream, which drops a job's repeated result by its
	// message id.
	counts := w.resultCounts()
	f.resultsFrom = "stream " + partResultsStream
	var missing, extra []string
	for step, ids := range jobsOf {
		for id := range ids {
			switch n := counts[step][id]; {
			case n == 0:
				missing = append(missing, step+"/"+id)
			case n > 1:
				extra = append(extra, fmt.Sprintf("%s/%s ×%d", step, id, n))
				f.dupResults += n - 1
			}
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	f.missingResults = len(missing)
	if len(missing) > 0 {
		t.Errorf("MISSING results: %d jobs have no result on %s: %v", len(missing), partResultsStream, missing[:min(10, len(missing))])
	}
	if len(extra) > 0 {
		t.Errorf("DUPLICATE results on %s: %v", partResultsStream, extra[:min(10, len(extra))])
	}
	f.reruns = results.reruns("pstep1") + results.reruns("pstep2")

	// The volumes: version N holds N whole lines, every flow of the volume is there, its
	// `last` file names its last line's flow, and every version was committed by one job of
	// the volume's flows.
	vols := w.e.volumes(nil, 3)
	ctx := w.e.ctx(3 * time.Minute)
	perVolume := map[string][]string{}
	for _, id := range all {
		perVolume[volumeOf[id]] = append(perVolume[volumeOf[id]], id)
	}
	var summary []string
	for _, name := range keys(perVolume) {
		content, err := readVolume(ctx, vols, name, "log")
		if err != nil {
			t.Errorf("volume %s: %v", name, err)
			continue
		}
		last, err := readVolume(ctx, vols, name, "last")
		if err != nil {
			t.Errorf("volume %s: %v", name, err)
			continue
		}
		hist, err := vols.History(ctx, name)
		if err != nil || len(hist) == 0 {
			t.Errorf("volume %s: history %v (%d versions)", name, err, len(hist))
			continue
		}
		version := hist[len(hist)-1].Version
		lines := strings.Split(strings.TrimSuffix(content, "\n"), "\n")
		seen := map[string]int{}
		for _, l := range lines {
			fs := strings.Fields(l)
			if len(fs) != 2 || volumeOf[fs[0]] != name {
				t.Errorf("volume %s: malformed or misplaced line %q", name, l)
				continue
			}
			seen[fs[0]]++
		}
		for _, id := range perVolume[name] {
			switch seen[id] {
			case 0:
				t.Errorf("volume %s: flow %s is missing", name, id)
			case 1:
			default:
				f.committedTwice++ // a run that committed, lost its record or ack, and ran again
			}
		}
		if uint64(len(lines)) != version || !strings.HasSuffix(content, "\n") {
			t.Errorf("volume %s: version %d holds %d lines; every commit must add exactly one whole line", name, version, len(lines))
		}
		if lf := strings.Fields(lines[len(lines)-1]); len(lf) == 0 || strings.TrimSpace(last) != lf[0] {
			t.Errorf("MIXED volume %s at version %d: `last` says %q, the log's last line is %q", name, version, strings.TrimSpace(last), lines[len(lines)-1])
		}
		for _, h := range hist {
			if !allSteps2[h.JobID] {
				t.Errorf("volume %s version %d was committed by %q, not a second step of this run", name, h.Version, h.JobID)
			}
		}
		summary = append(summary, fmt.Sprintf("%s v%d", name, version))
	}
	t.Logf("volumes: %s; flows committed twice: %d", strings.Join(summary, ", "), f.committedTwice)
	return f
}

// partCutOffLog is what a host logs when it notices it cannot reach JetStream.
const partCutOffLog = "cannot reach JetStream: this host can take no work"

// partResultsStream is the results stream of issue 28 (item 2), capturing agent.result.> and
// agent.error.> with a message id derived from the job.
const partResultsStream = "AGENT_RESULTS"

// resultCounts counts the results on the results stream, per step and job.
func (w *partWorld) resultCounts() map[string]map[string]int {
	t := w.t
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stream, err := w.e.js.Stream(ctx, partResultsStream)
	if err != nil {
		t.Fatalf("look up the results stream %s: %v", partResultsStream, err)
	}
	out := map[string]map[string]int{"pstep1": {}, "pstep2": {}}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs == 0 {
		return out
	}
	// Every message, error events too, so that the count read can be checked against the
	// stream's; only results are tallied.
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	// Read until every message the stream held is counted: a fetch may come back empty while
	// the cluster, just healed, moves its leaders.
	var read uint64
	for read < info.State.Msgs && ctx.Err() == nil {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			read++
			step, isResult := strings.CutPrefix(m.Subject(), bus.ResultPrefix)
			if isResult && out[step] != nil {
				out[step][m.Headers().Get(bus.HeaderJobID)]++
			}
		}
	}
	if read < info.State.Msgs {
		t.Fatalf("read %d of the %d messages %s holds before the deadline", read, info.State.Msgs, partResultsStream)
	}
	return out
}

// partRun is what a fault reports back to the checks.
type partRun struct {
	events []string
	// cutHost is the site whose host was cut off (nil: no cut) from cutAt to healAt; in a
	// SIGKILL part, killedHost is the host killed at cutAt and running again at healAt.
	cutHost, killedHost *site
	cutAt, healAt       time.Time
	hostRestarts        int
}

// TestPartitions runs 3,000 two-step flows through a 3-node cluster with a host beside each
// node, each pair in a namespace of its own (see lab), in three parts of 1,000 flows each, one
// fault per part while its flows arrive at a steady rate (20 a second):
//
//   - site cut off: site 3 (node n3 and its host) cut off from the other two for 30 s;
//   - host cut from its node: host 2 cut off from node n2 only, for two ack waits (their site's
//     loopback goes down; both stay on the network: the host lives, its acks fail);
//   - SIGKILL host and node: host 3 and node n2 killed at the same moment, restarted on their
//     data after half an ack wait.
//
// After each part: every flow of the part completed once in effect (one succeeded record per
// step, one result per job), every volume at a committed version with no mixed files, and, for
// a cut, the cut-off host stopped taking work within its ack wait, said so in its log, and took
// work again after the heal. The parts share one cluster (and its volumes) to keep CI's time.
// The nodes run with nats.conf's cluster block (ping_interval, ping_max and write_deadline of
// a few seconds): with nats-server's defaults a silent node kept the majority waiting on it for
// most of a 30 s cut.
func TestPartitions(t *testing.T) {
	t.Parallel()
	w := newPartWorld(t)
	results := w.e.watch("pstep1", "pstep2")
	volumeOf := map[string]string{}
	var all []string
	parts := []struct {
		name, prefix string
		fault        func(t *testing.T, r *partRun)
	}{
		{"site cut off", "cut", func(t *testing.T, r *partRun) {
			s := w.sites[2]
			r.cutHost, r.cutAt = s, time.Now()
			if err := s.ns.cut(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(30 * time.Second) // the partition itself
			if err := s.ns.heal(); err != nil {
				t.Fatal(err)
			}
			r.healAt = time.Now()
		}},
		{"host cut from its node", "hcut", func(t *testing.T, r *partRun) {
			s := w.sites[1]
			r.cutHost, r.cutAt = s, time.Now()
			if err := s.ns.cutLoopback(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * partAckWait) // the partition itself
			if err := s.ns.healLoopback(); err != nil {
				t.Fatal(err)
			}
			r.healAt = time.Now()
		}},
		{"SIGKILL host and node", "kill", func(t *testing.T, r *partRun) {
			h, n := w.sites[2], w.sites[1]
			r.killedHost, r.cutAt = h, time.Now()
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); h.host.kill() }()
			go func() { defer wg.Done(); n.node.kill() }()
			wg.Wait()
			r.events = append(r.events, fmt.Sprintf("SIGKILL %s and node n2, both gone in %s", h.hostName(), time.Since(r.cutAt).Round(time.Millisecond)))
			time.Sleep(partAckWait / 2) // both stay dead this long: part of the fault
			n.node.t, h.host.proc.t = t, t
			n.node.start()
			w.waitNode(n)
			r.hostRestarts = w.superviseHost(h)
			r.healAt = time.Now()
		}},
	}
	for _, p := range parts {
		if !t.Run(p.name, func(t *testing.T) {
			w.t, w.e.t = t, t
			begin := time.Now()
			n := partFlows / len(parts)
			load := w.load(p.prefix, n, partLoadTime)
			if !natstest.Poll(2*time.Minute, func() bool { return load.count() >= n/5 }) {
				t.Fatalf("only %d flows accepted before the fault", load.count())
			}
			r := &partRun{}
			r.events = append(r.events, fmt.Sprintf("fault at +%s, %d flows accepted, %d finished",
				time.Since(begin).Round(time.Millisecond), load.count(), results.flowsDone("pstep2")-len(all)))
			p.fault(t, r)
			r.events = append(r.events, fmt.Sprintf("fault over at +%s, %d flows accepted, %d finished",
				time.Since(begin).Round(time.Millisecond), load.count(), results.flowsDone("pstep2")-len(all)))
			ids := load.wait(t)
			published := time.Since(begin)
			finished := w.waitFlows(ids, 5*time.Minute)
			for _, ev := range r.events {
				t.Log(ev)
			}
			for id, v := range load.volumeOf {
				volumeOf[id] = v
			}
			all = append(all, ids...)
			f := w.check(ids, all, volumeOf, results)
			if len(ids) != n {
				t.Errorf("accepted %d flows, want %d", len(ids), n)
			}
			recs := w.e.records()
			byHost := map[string]int{}
			var done []time.Time // when each second step of the part finished
			part := map[string]bool{}
			for _, id := range ids {
				part[id] = true
			}
			for _, rec := range recs {
				if !part[rec.FlowID] {
					continue
				}
				byHost[rec.Host]++
				if rec.Function == "pstep2" && rec.Status == jobtype.Succeeded {
					done = append(done, rec.Finished)
				}
			}
			recover := "-"
			if h := cmpOr(r.cutHost, r.killedHost); h != nil {
				if at := w.checkTakesWorkAgain(r, h, recs); !at.IsZero() {
					recover = at.Sub(r.healAt).Round(time.Millisecond).String()
				}
			}
			if r.cutHost != nil {
				w.checkCutHost(r, recs)
			}
			elapsed := finished.Sub(begin)
			t.Logf("PARTITION %s: flows %d, lost %d, duplicate records %d, duplicate results %d, missing results %d (from %s), reruns %d, committed twice %d; "+
				"published in %s, all done in %s (%.1f flows/s); longest time without a flow finishing %s; time to recover %s "+
				"(heal or restart to the host's next job); host restarts %d; jobs by host %v; error events %d",
				p.name, f.flows, f.lost, f.dupRecords, f.dupResults, f.missingResults, f.resultsFrom, f.reruns, f.committedTwice,
				published.Round(time.Millisecond), elapsed.Round(time.Millisecond), float64(f.flows)/elapsed.Seconds(),
				longestGap(done).Round(time.Millisecond), recover, r.hostRestarts, byHost, len(results.errorEvents()))
		}) {
			break // the next part would start from a broken cluster
		}
	}
	if ev := results.errorEvents(); len(ev) > 0 {
		t.Errorf("%d error events, e.g. %s", len(ev), strings.Join(ev[:min(3, len(ev))], "\n"))
	}
}

func cmpOr(a, b *site) *site {
	if a != nil {
		return a
	}
	return b
}

// longestGap is the longest time between two consecutive instants.
func longestGap(at []time.Time) time.Duration {
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	var gap time.Duration
	for i := 1; i < len(at); i++ {
		gap = max(gap, at[i].Sub(at[i-1]))
	}
	return gap
}

// superviseHost starts a killed host again as a service manager would (systemd's
// Restart=on-failure): a host that starts while the cluster is still electing leaders can
// give up and exit, and is started again. It returns how many starts it took.
func (w *partWorld) superviseHost(s *site) int {
	w.t.Helper()
	for i := 1; ; i++ {
		s.host.proc.start()
		if natstest.Poll(60*time.Second, func() bool { return !s.host.running() || w.healthy(s) }) && s.host.running() {
			return i
		}
		err := s.host.wait(5 * time.Second) // it has exited, or is stuck starting: then this says so
		if i == 5 {
			w.t.Fatalf("host %s did not become ready in %d starts (last: %v):\n%s", s.hostName(), i, err, tail(s.host.logPath, 20))
		}
		w.t.Logf("host %s exited while starting (%v): started again, as a service manager would", s.hostName(), err)
		time.Sleep(time.Second)
	}
}

// checkTakesWorkAgain returns when host s started its first job after the heal (or restart),
// and fails the test if it started none.
func (w *partWorld) checkTakesWorkAgain(r *partRun, s *site, recs []*jobs.Record) time.Time {
	var first time.Time
	for _, rec := range recs {
		if rec.Host == s.hostName() && rec.Started.After(r.healAt) && (first.IsZero() || rec.Started.Before(first)) {
			first = rec.Started
		}
	}
	if first.IsZero() {
		w.t.Errorf("host %s took no work after the heal or restart", s.hostName())
	}
	return first
}

// checkCutHost asserts what a cut-off host did: it started no job later than its ack wait
// after the cut until the heal, and said in its log, within its ack wait, that it could not
// reach JetStream.
func (w *partWorld) checkCutHost(r *partRun, recs []*jobs.Record) {
	t := w.t
	name := r.cutHost.hostName()
	var during []string
	for _, rec := range recs {
		if rec.Host == name && rec.Started.After(r.cutAt.Add(partAckWait)) && rec.Started.Before(r.healAt) {
			during = append(during, fmt.Sprintf("%s started +%s", rec.ID, rec.Started.Sub(r.cutAt).Round(time.Millisecond)))
		}
	}
	if len(during) > 0 {
		t.Errorf("the cut-off host %s started %d jobs more than its ack wait (%s) after the cut: %v", name, len(during), partAckWait, during[:min(5, len(during))])
	}
	lines := logLinesBetween(r.cutHost.host.logPath, r.cutAt, r.healAt)
	said := ""
	for _, l := range lines {
		if strings.Contains(l, partCutOffLog) {
			said = l
			break
		}
	}
	at, ok := logTime(said)
	if !ok {
		t.Errorf("the cut-off host %s never logged %q while cut off; it logged:\n%s", name, partCutOffLog, strings.Join(lines, "\n"))
		return
	}
	t.Logf("%s said it was cut off %s after the cut (its ack wait: %s): %s", name, at.Sub(r.cutAt).Round(time.Millisecond), partAckWait, said)
	if at.Sub(r.cutAt) > partAckWait {
		t.Errorf("the cut-off host %s said it was cut off only %s after the cut, after its ack wait %s", name, at.Sub(r.cutAt), partAckWait)
	}
}

// logLinesBetween returns a host's JSON log lines stamped between from and to.
func logLinesBetween(path string, from, to time.Time) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		// The log's clock has milliseconds; from was taken just before the fault.
		at, ok := logTime(l)
		if ok && !at.Before(from.Truncate(time.Millisecond)) && at.Before(to) {
			out = append(out, l)
		}
	}
	return out
}

// logTime reads the "time" field zap's JSON encoder writes (ISO 8601, milliseconds).
func logTime(line string) (time.Time, bool) {
	i := strings.Index(line, `"time":"`)
	if i < 0 {
		return time.Time{}, false
	}
	rest := line[i+len(`"time":"`):]
	j := strings.IndexByte(rest, '"')
	if j < 0 {
		return time.Time{}, false
	}
	at, err := time.Parse("2006-01-02T15:04:05.000Z0700", rest[:j])
	return at, err == nil
}
