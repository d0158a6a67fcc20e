package cluster_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/objstore"
	"github.com/agenthost/host/internal/secrets"
	"github.com/agenthost/host/internal/testkit/natstest"
	"github.com/agenthost/host/internal/testkit/testwait"
)

// env is one test's world: a functions directory, a secrets key shared by its hosts, and the
// test's own NATS connection, which talks to the hosts as a user would.
type env struct {
	t       *testing.T
	dir     string
	fnDir   string
	keyFile string
	url     string
	nc      *nats.Conn
	js      jetstream.JetStream
}

func newEnv(t *testing.T, natsURL string) *env {
	t.Helper()
	requireJail(t)
	e := &env{t: t, dir: tempDir(t, "cluster-"), url: natsURL}
	e.fnDir = filepath.Join(e.dir, "functions")
	e.keyFile = filepath.Join(e.dir, "keys", "secrets.key")
	if _, err := secrets.LoadKey(e.keyFile, true); err != nil {
		t.Fatal(err)
	}
	var err error
	e.nc, err = nats.Connect(natsURL, nats.Name("test-client"), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond),
		nats.RetryOnFailedConnect(true), nats.ReconnectBufSize(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.nc.Close)
	if e.js, err = jetstream.New(e.nc); err != nil {
		t.Fatal(err)
	}
	return e
}

// fn writes a function into the functions directory.
func (e *env) fn(name, content string) { writeFile(e.t, filepath.Join(e.fnDir, name), content) }

// host starts a `host serve` process on this env's NATS, functions and key.
func (e *env) host(o hostOpts) *hostProc {
	e.t.Helper()
	return startHost(e.t, e.dir, e.defaults(o))
}

func (e *env) defaults(o hostOpts) hostOpts {
	if o.natsURL == "" {
		o.natsURL = e.url
	}
	if o.fnDir == "" {
		o.fnDir = e.fnDir
	}
	if o.keyFile == "" {
		o.keyFile = e.keyFile
	}
	return o
}

func (e *env) ctx(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	e.t.Cleanup(cancel)
	return ctx
}

// publish sends a trigger through JetStream with a message id and retries until the stream has
// it (the same id makes retries safe), as a careful producer does while a node fails over.
// It reports whether the message was accepted.
func (e *env) publish(subject, msgID string, payload []byte, hdr ...string) error {
	m := nats.NewMsg(subject)
	m.Data = payload
	m.Header.Set(bus.HeaderMsgID, msgID)
	for i := 0; i+1 < len(hdr); i += 2 {
		m.Header.Set(hdr[i], hdr[i+1])
	}
	err := testwait.Poll(60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := e.js.PublishMsg(ctx, m)
		return err
	})
	if err != nil {
		return fmt.Errorf("publish %s %s: %w", subject, msgID, err)
	}
	return nil
}

// store opens the job records.
func (e *env) store() *jobs.Store {
	e.t.Helper()
	s, err := jobs.Bind(e.ctx(30*time.Second), e.js)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// records lists every job record.
func (e *env) records() []*jobs.Record {
	e.t.Helper()
	ctx := e.ctx(60 * time.Second)
	for {
		recs, err := e.store().List(ctx, nil)
		if err == nil {
			return recs
		}
		// A cluster electing its leaders (a node cut off, killed, or back) answers for a
		// while that JetStream is unavailable; that is the fault the test makes, not a failure.
		if ctx.Err() != nil || !strings.Contains(err.Error(), "temporarily unavailable") && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
			e.t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// volumes opens the volume store as `host volumes` does, with the given replicas so that
// opening it does not change the buckets' replication.
func (e *env) volumes(s3 *objstore.S3Config, replicas int) *objstore.Volumes {
	e.t.Helper()
	ctx := e.ctx(30 * time.Second)
	var b objstore.Backend
	var err error
	if s3 != nil {
		b, err = objstore.NewS3Backend(ctx, *s3)
	} else {
		b, err = objstore.NewJetStreamBackend(ctx, e.js, objstore.DefaultJetStreamBucket, replicas)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	v, err := objstore.New(ctx, e.js, b, objstore.Options{Log: zap.NewNop(), Replicas: replicas})
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

func readVolume(ctx context.Context, v *objstore.Volumes, name, path string) (string, error) {
	var out bytes.Buffer
	err := v.Get(ctx, name, 0, path, &out)
	return out.String(), err
}

// latestVersion is a volume's current version number (0: none yet).
func latestVersion(ctx context.Context, v *objstore.Volumes, name string) uint64 {
	h, err := v.History(ctx, name)
	if err != nil || len(h) == 0 {
		return 0
	}
	return h[len(h)-1].Version
}

// ---- watching what the hosts publish ----

// flowLog records every result and error event the hosts publish for some functions, by job
// and by flow. Subscribed before anything is published, on a connection that stays up.
type flowLog struct {
	mu sync.Mutex
	// results[fn][jobID] counts result events; flows[fn][flowID] is the set of job ids.
	results map[string]map[string]int
	flows   map[string]map[string]map[string]bool
	firstAt map[string]time.Time
	lastAt  map[string]time.Time
	errors  []string
}

func (e *env) watch(functions ...string) *flowLog {
	e.t.Helper()
	l := &flowLog{results: map[string]map[string]int{}, flows: map[string]map[string]map[string]bool{},
		firstAt: map[string]time.Time{}, lastAt: map[string]time.Time{}}
	for _, fn := range functions {
		l.results[fn], l.flows[fn] = map[string]int{}, map[string]map[string]bool{}
		sub, err := e.nc.Subscribe(bus.ResultSubject(fn), func(m *nats.Msg) {
			job, flow := m.Header.Get(bus.HeaderJobID), m.Header.Get(bus.HeaderFlowID)
			now := time.Now()
			l.mu.Lock()
			defer l.mu.Unlock()
			l.results[fn][job]++
			if l.flows[fn][flow] == nil {
				l.flows[fn][flow] = map[string]bool{}
			}
			l.flows[fn][flow][job] = true
			if l.firstAt[fn].IsZero() {
				l.firstAt[fn] = now
			}
			l.lastAt[fn] = now
		})
		if err != nil {
			e.t.Fatal(err)
		}
		sub.SetPendingLimits(-1, -1)
		e.t.Cleanup(func() { sub.Unsubscribe() })
	}
	sub, err := e.nc.Subscribe(bus.ErrorPrefix+">", func(m *nats.Msg) {
		l.mu.Lock()
		l.errors = append(l.errors, m.Subject+" "+string(m.Data))
		l.mu.Unlock()
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { sub.Unsubscribe() })
	if err := e.nc.Flush(); err != nil {
		e.t.Fatal(err)
	}
	return l
}

// flowsDone counts the flows with at least one result of fn.
func (l *flowLog) flowsDone(fn string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.flows[fn])
}

// missing returns the flows of want that have no result of fn.
func (l *flowLog) missing(fn string, want []string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, f := range want {
		if len(l.flows[fn][f]) == 0 {
			out = append(out, f)
		}
	}
	return out
}

// splitFlows returns the flows in which fn ran as more than one job: a step triggered twice.
func (l *flowLog) splitFlows(fn string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for flow, ids := range l.flows[fn] {
		if len(ids) > 1 {
			out = append(out, fmt.Sprintf("%s: %v", flow, keys(ids)))
		}
	}
	sort.Strings(out)
	return out
}

// reruns counts result events of fn beyond the first per job: a job that ran to its end again
// (after a kill between publishing and acking), which is allowed; its outputs deduplicate.
func (l *flowLog) reruns(fn string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.results[fn] {
		n += c - 1
	}
	return n
}

// jobs returns the job ids of fn seen in a flow.
func (l *flowLog) jobs(fn, flow string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return keys(l.flows[fn][flow])
}

func (l *flowLog) errorEvents() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.errors...)
}

func (l *flowLog) span(fn string) (time.Time, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.firstAt[fn], l.lastAt[fn]
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// triggerLog sees every message the trigger stream stores on one subject, through a durable
// consumer of the test's own: a next step triggered twice shows as two stored messages for one
// flow, however the host named them.
type triggerLog struct {
	mu   sync.Mutex
	seqs map[string]map[uint64]bool // flow → stream sequences
}

func (e *env) observe(subject string) *triggerLog {
	e.t.Helper()
	ctx := e.ctx(30 * time.Second)
	stream, err := e.js.Stream(ctx, bus.RunStream)
	if err != nil {
		e.t.Fatal(err)
	}
	name := observerName(subject)
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: name, FilterSubject: subject, AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait: 5 * time.Second, MaxDeliver: -1,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	l := &triggerLog{seqs: map[string]map[uint64]bool{}}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		meta, err := m.Metadata()
		if err != nil {
			return
		}
		flow := m.Headers().Get(bus.HeaderFlowID)
		l.mu.Lock()
		if l.seqs[flow] == nil {
			l.seqs[flow] = map[uint64]bool{}
		}
		l.seqs[flow][meta.Sequence.Stream] = true
		l.mu.Unlock()
		_ = m.Ack()
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(cc.Stop)
	return l
}

func observerName(subject string) string {
	return "test_observer_" + strings.NewReplacer(".", "_", "*", "any", ">", "all").Replace(subject)
}

// observerSettled reports whether the observer of subject has seen and acked everything the
// stream stored on it so far.
func (e *env) observerSettled(subject string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := e.js.Stream(ctx, bus.RunStream)
	if err != nil {
		return false
	}
	c, err := stream.Consumer(ctx, observerName(subject))
	if err != nil {
		return false
	}
	info, err := c.Info(ctx)
	return err == nil && info.NumPending == 0 && info.NumAckPending == 0
}

// doubled returns the flows whose subject was stored more than once.
func (l *triggerLog) doubled() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for flow, s := range l.seqs {
		if len(s) > 1 {
			out = append(out, fmt.Sprintf("%s ×%d", flow, len(s)))
		}
	}
	sort.Strings(out)
	return out
}

// count is how many messages of a flow were stored.
func (l *triggerLog) count(flow string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seqs[flow])
}

func (l *triggerLog) flows() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seqs)
}

// logLines collects the output lines of a function's jobs (agent.logs.<fn>.<job>) with the
// time each arrived.
type logLines struct {
	mu    sync.Mutex
	lines []logLine
}

type logLine struct {
	job, text string
	at        time.Time
}

func (e *env) logs(fn string) *logLines {
	e.t.Helper()
	l := &logLines{}
	sub, err := e.nc.Subscribe(bus.LogsPrefix+fn+".>", func(m *nats.Msg) {
		l.mu.Lock()
		l.lines = append(l.lines, logLine{job: m.Header.Get(bus.HeaderJobID), text: string(m.Data), at: time.Now()})
		l.mu.Unlock()
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { sub.Unsubscribe() })
	if err := e.nc.Flush(); err != nil {
		e.t.Fatal(err)
	}
	return l
}

// matching returns the lines of job (any job if "") that contain text.
func (l *logLines) matching(job, text string) []logLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []logLine
	for _, x := range l.lines {
		if (job == "" || x.job == job) && strings.Contains(x.text, text) {
			out = append(out, x)
		}
	}
	return out
}

// waitCount waits until at least n lines of job contain text and returns them.
func (l *logLines) waitCount(within time.Duration, job, text string, n int) []logLine {
	var got []logLine
	natstest.Poll(within, func() bool {
		got = l.matching(job, text)
		return len(got) >= n
	})
	return got
}

// consumerSettled reports whether a function's consumer has nothing pending or unacked.
func (e *env) consumerSettled(fn string) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := e.js.Stream(ctx, bus.RunStream)
	if err != nil {
		return false, err.Error()
	}
	c, err := stream.Consumer(ctx, bus.ConsumerName(fn))
	if err != nil {
		return false, err.Error()
	}
	info, err := c.Info(ctx)
	if err != nil {
		return false, err.Error()
	}
	return info.NumPending == 0 && info.NumAckPending == 0,
		fmt.Sprintf("%s: pending %d, ack pending %d, redelivered %d", fn, info.NumPending, info.NumAckPending, info.NumRedelivered)
}
