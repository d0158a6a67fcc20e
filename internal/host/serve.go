package host

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/presence"
	"github.com/agenthost/host/internal/retry"
)

// served is one function version being served: its consumer and its fetch loops.
type served struct {
	fn      *functions.Function
	codeDir string
	cancel  context.CancelFunc
	loops   sync.WaitGroup
	since   time.Time // when this host started serving this version, as it announces

	mu       sync.Mutex
	consumer jetstream.Consumer // replaced when someone deletes it under us

	// annMu orders this version's announcements against its retirement, so that a heartbeat
	// that read the served set before a reload cannot announce a version after it left.
	annMu   sync.Mutex
	retired bool

	// An idle function waits with one pull, not one per slot: the slots after the first sleep
	// until a slot takes a message, and go back to sleep once nothing has been taken for
	// idleAfter and no slot holds a job. Each waiting pull costs the server and the host a
	// heartbeat every few seconds; with 200 functions of 2 slots that was most of an idle
	// host's CPU. A burst still fills every slot: the first message wakes the others at once.
	busyMu sync.Mutex
	busy   int           // jobs the slots hold
	taken  time.Time     // when a slot last took a message
	wake   chan struct{} // closed, and replaced, when a slot takes a message

	// pulls ends this function's waiting pulls when its consumer changed (renewPulls).
	pulls pullGeneration
}

// idleAfter is how long a function takes nothing, with no job running, before its extra
// slots stop pulling: one fetch's expiry, so that a slot sleeps after a pull that found nothing.
const idleAfter = fetchExpiry

// took marks a message taken by a slot, waking the slots that sleep.
func (s *served) took() {
	s.busyMu.Lock()
	defer s.busyMu.Unlock()
	s.busy++
	s.taken = time.Now()
	if s.wake != nil {
		close(s.wake)
		s.wake = nil
	}
}

// finished marks a slot's job done.
func (s *served) finished() {
	s.busyMu.Lock()
	s.busy--
	s.busyMu.Unlock()
}

// awaitWork returns at once while the function is busy or was lately, and otherwise sleeps
// until a slot takes a message or ctx ends; false when ctx ended.
func (s *served) awaitWork(ctx context.Context) bool {
	s.busyMu.Lock()
	if s.busy > 0 || time.Since(s.taken) < idleAfter {
		s.busyMu.Unlock()
		return true
	}
	if s.wake == nil {
		s.wake = make(chan struct{})
	}
	wake := s.wake
	s.busyMu.Unlock()
	select {
	case <-wake:
		return true
	case <-ctx.Done():
		return false
	}
}

func (s *served) cons() jetstream.Consumer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.consumer
}

func (s *served) setCons(c jetstream.Consumer) {
	s.mu.Lock()
	s.consumer = c
	s.mu.Unlock()
}

// reload reads the functions directory and makes the served set match it: new functions start,
// changed ones are replaced, deleted or refused ones stop. Running jobs are never interrupted.
func (h *Host) reload(ctx context.Context) error {
	fns, errs := functions.Load(h.cfg.FunctionsDir)
	errs = append(errs, functions.RefuseNetworkHost(fns, h.cfg.AllowNetworkHost)...)
	for _, err := range errs {
		h.log.Error("function refused; fix the file and it is picked up again", zap.Error(err))
	}
	h.m.refused.Set(float64(len(errs)))
	if fns == nil {
		fns = map[string]*functions.Function{}
	}

	var subjects []string
	for _, f := range fns {
		subjects = append(subjects, f.Subjects()...)
	}
	stream, err := bus.EnsureRunStream(ctx, h.js, subjects, h.cfg.Streams)
	if err != nil {
		return err
	}
	warnUnheardNext(h.log, fns)
	warnUnservedJoins(h.log, fns)
	for _, err := range functions.UnknownTools(fns) {
		h.log.Warn("a tools: line names a function that is not served here", zap.Error(err))
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	h.stream = stream
	h.captured = stream.CachedInfo().Config.Subjects
	h.gates = approvalGates(fns)
	for name, s := range h.served {
		if f, ok := fns[name]; ok && f.Hash == s.fn.Hash {
			continue
		}
		s.cancel() // its loops end on their own; running jobs finish
		h.sched.Remove(name)
		delete(h.served, name)
		_, replaced := fns[name]
		h.retire(ctx, s, !replaced)
		if !replaced {
			h.cool(name)
			h.log.Info("function removed; its queued triggers wait in its consumer", zap.String("function", name))
		}
	}
	h.unserved = 0
	for name, f := range fns {
		if _, ok := h.served[name]; ok {
			continue
		}
		s, err := h.serve(ctx, f)
		if err != nil {
			h.unserved++
			h.log.Error("cannot serve function; the host tries again shortly (is NATS reachable, and the data directory writable?)", zap.String("function", name), zap.Error(err))
			continue
		}
		h.served[name] = s
		// A new version's warm jails replace the old one's: the next job runs the new code.
		if w, ok := h.runner.(Warmer); ok {
			w.Warm(f, s.codeDir)
		}
		if f.Spec.Schedule != "" {
			if err := h.sched.Set(h.takeCtx, name, f.Spec.Schedule); err != nil {
				h.log.Error("schedule not started", zap.String("function", name), zap.Error(err))
			}
		}
		h.log.Info("serving function", zap.String("function", name), zap.String("runtime", string(f.Runtime)),
			zap.Bool("sandbox", f.Spec.Sandbox), zap.Strings("subjects", f.Subjects()), zap.String("version", f.Hash))
	}
	h.m.functions.Set(float64(len(h.served)))
	return nil
}

// cool tears down the warm jails of a function no longer served.
func (h *Host) cool(name string) {
	if w, ok := h.runner.(Warmer); ok {
		w.Cool(name)
	}
}

// warnUnservedJoins warns about join: lines naming a function that is not loaded here: the
// join would wait for it until its timeout, which names it.
func warnUnservedJoins(log *zap.Logger, fns map[string]*functions.Function) {
	for _, f := range fns {
		for _, awaited := range f.Spec.Join {
			if _, ok := fns[awaited]; !ok {
				log.Warn("a join: names a function that is not served here; the join waits for it until its join-timeout",
					zap.String("function", f.Name), zap.String("awaits", awaited))
			}
		}
	}
}

// warnUnheardNext warns about next: subjects that no loaded function listens on: the result
// still goes there and to agent.result.<name>, but it likely is a typo.
func warnUnheardNext(log *zap.Logger, fns map[string]*functions.Function) {
	for _, f := range fns {
		for _, next := range f.Routes.Subjects() {
			heard := false
			for _, g := range fns {
				if slices.ContainsFunc(g.Subjects(), func(s string) bool { return bus.SubjectMatches(s, next) }) {
					heard = true
					break
				}
			}
			if !heard {
				log.Warn("no function here listens on a next: subject; the result still appears on agent.result.<name>",
					zap.String("function", f.Name), zap.String("next", next))
			}
		}
	}
}

// serve snapshots a function, binds its consumer and starts one fetch loop per run slot.
func (h *Host) serve(ctx context.Context, f *functions.Function) (*served, error) {
	codeDir, err := f.Snapshot(filepath.Join(h.cfg.DataDir, "functions"), h.cfg.SnapshotGroup)
	if err != nil {
		return nil, err
	}
	cons, err := bus.EnsureConsumer(ctx, h.stream, f.Name, f.Subjects(), h.cfg.AckWait, f.Spec.Queue)
	if err != nil {
		return nil, err
	}
	h.warnOtherVersions(ctx, f)
	slots := h.slots(f)
	loopCtx, cancel := context.WithCancel(h.takeCtx)
	s := &served{fn: f, codeDir: codeDir, consumer: cons, cancel: cancel, since: time.Now()}
	h.announce(ctx, s)
	for slot := range slots {
		s.loops.Add(1)
		go func() {
			defer s.loops.Done()
			h.fetchLoop(loopCtx, s, slot == 0)
		}()
	}
	return s, nil
}

// slots is how many jobs of f this host runs at once.
func (h *Host) slots(f *functions.Function) int {
	if f.Spec.Concurrency > 0 {
		return f.Spec.Concurrency
	}
	return h.cfg.Concurrency
}

// warnOtherVersions warns when another host serves different code under f's name: they share
// one consumer, so a message would run one version or the other depending on which host takes it.
func (h *Host) warnOtherVersions(ctx context.Context, f *functions.Function) {
	for _, other := range h.announced(ctx, f.Name) {
		if other.Version != f.Hash && other.Host != h.cfg.HostID {
			h.log.Warn("another host serves different code for this function; runs go to either version until both hosts serve the same files",
				zap.String("function", f.Name), zap.String("this_version", f.Hash), zap.String("this_host", h.cfg.HostID),
				zap.String("other_version", other.Version), zap.String("other_host", other.Host), zap.Time("other_since", other.Since))
		}
	}
}

// announce records which version of a function this host serves, under <function>.<host> in
// agent_functions (package presence). The entry is trusted while this host says it is alive
// (heartbeat); a host that dies leaves the listings within AnnounceTTL, one that stops at once
// (withdraw).
func (h *Host) announce(ctx context.Context, s *served) {
	if h.presence == nil {
		return
	}
	f := s.fn
	a := presence.Announcement{Version: f.Hash, Host: h.cfg.HostID, Since: s.since, Runtime: string(f.Runtime),
		Subjects: f.Subjects(), Concurrency: h.slots(f)}
	if w, ok := h.runner.(Warmer); ok {
		n := w.WarmWanted(f)
		a.Warm = &n
	}
	s.annMu.Lock()
	defer s.annMu.Unlock()
	if s.retired {
		return
	}
	if err := h.presence.Announce(ctx, f.Name, a); err != nil {
		h.log.Debug("cannot announce the function's version", zap.String("function", f.Name), zap.Error(err))
	}
}

// retire ends a version's announcements; withdraw also deletes its entry, for a function this
// host no longer serves at all (a replaced version's entry is rewritten by its successor).
func (h *Host) retire(ctx context.Context, s *served, withdraw bool) {
	s.annMu.Lock()
	defer s.annMu.Unlock()
	s.retired = true
	if !withdraw || h.presence == nil {
		return
	}
	if err := h.presence.Withdraw(ctx, s.fn.Name, h.cfg.HostID); err != nil {
		h.log.Debug("cannot withdraw the function's version", zap.String("function", s.fn.Name), zap.Error(err))
	}
}

// heartbeat says this host is alive every AnnounceTTL/3 (or every third of the ack wait, if
// that is shorter and at least a second), and writes every served version's entry again every
// third of presence.FunctionsTTL, until ctx ends. A write that fails after one that did not is
// how the host notices it is cut off from JetStream, in time to say so before the messages it
// holds go to other hosts: a silent partition is seen by no NATS ping for minutes.
func (h *Host) heartbeat(ctx context.Context) {
	every := h.cfg.AnnounceTTL / 3
	if a := h.cfg.AckWait / 3; a >= time.Second && a < every {
		every = a
	}
	t := time.NewTicker(every)
	defer t.Stop()
	rewritten := time.Now()
	reached := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		actx, cancel := context.WithTimeout(ctx, every)
		err := h.presence.Alive(actx, h.cfg.HostID)
		h.noteWrite(err)
		switch {
		case err != nil && reached:
			h.log.Warn("cannot reach JetStream: this host can take no work until it does, and the jobs it holds go to other hosts after the ack wait",
				zap.String("nats", h.nc.ConnectedUrlRedacted()), zap.Duration("ack_wait", h.cfg.AckWait), zap.Error(err))
		case err != nil:
			h.log.Warn("cannot say this host is alive; other hosts and the CLI list its functions as unserved until it can", zap.Error(err))
		case !reached:
			h.log.Info("JetStream reached again: taking work", zap.String("nats", h.nc.ConnectedUrlRedacted()))
		}
		reached = err == nil
		cancel()
		if time.Since(rewritten) < presence.FunctionsTTL/3 {
			continue
		}
		rewritten = time.Now()
		for _, s := range h.servedSnapshot() {
			actx, cancel := context.WithTimeout(ctx, every)
			h.announce(actx, s)
			cancel()
		}
	}
}

// announced lists what the live hosts serving a function have announced.
func (h *Host) announced(ctx context.Context, function string) []presence.Announcement {
	if h.presence == nil {
		return nil
	}
	entries, err := h.presence.List(ctx, function)
	if err != nil {
		return nil
	}
	out := make([]presence.Announcement, len(entries))
	for i, e := range entries {
		out[i] = e.Announcement
	}
	return out
}

// vanishedSettle is the least a fetch loop waits before recreating a consumer or stream that
// vanished. nats-server answers a stream delete before its files are all gone; a consumer or
// stream created at the same path meanwhile has come out broken (every store failing with
// "error opening msg block file", seen under load in the deleted-by-hand test).
const vanishedSettle = time.Second

// fetchLoop is one run slot: it asks for one message only when it can start it right away, so
// no host holds work it cannot begin (the ack clock starts at delivery). The lead slot always
// pulls; the others only while the function has work (served.awaitWork).
func (h *Host) fetchLoop(ctx context.Context, s *served, lead bool) {
	failures := 0 // in a row
	for ctx.Err() == nil {
		if !lead && !s.awaitWork(ctx) {
			return
		}
		if h.StoreRefusal() != nil {
			// A job taken now could commit nothing (its record, its volume, its ack): it
			// would run for naught and use up a delivery. The store watch says when to go on.
			select {
			case <-ctx.Done():
				return
			case <-time.After(storeCheckEvery):
			}
			continue
		}
		err := h.fetchOne(ctx, s)
		if err == nil || ctx.Err() != nil {
			failures = 0
			continue
		}
		failures++
		delay := retry.Fetch.Wait(failures)
		vanished := vanishedErr(err)
		var gone error
		if !vanished {
			// A deleted stream can take its "consumer deleted" answer to the waiting pull with
			// it, so the fetch ends only in a missed heartbeat or a timeout that says nothing
			// about why. Ask the server rather than take it for a passing failure and wait for
			// some later fetch to get a clear answer.
			gone = h.consumerGone(ctx, s)
			vanished = gone != nil
		}
		if vanished {
			delay = max(delay, vanishedSettle)
			fields := []zap.Field{zap.String("function", s.fn.Name), zap.Duration("in", delay), zap.Error(err)}
			if gone != nil {
				fields = append(fields, zap.NamedError("consumer_info", gone))
			}
			h.log.Warn("consumer or stream vanished; recreating it", fields...)
		} else {
			h.log.Warn("fetching work failed; retrying", zap.String("function", s.fn.Name), zap.Duration("in", delay), zap.Error(err))
		}
		// Wait before recreating too: a stream deleted a moment ago may still be being removed
		// by the server, and one created on top of that can come out broken.
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		if vanished {
			cons, err := h.rebind(ctx, s.fn)
			if err != nil {
				h.log.Warn("recreating the consumer failed; trying again", zap.String("function", s.fn.Name), zap.Error(err))
				continue
			}
			s.setCons(cons)
			h.log.Info("consumer recreated", zap.String("function", s.fn.Name))
		}
	}
}

// vanishedErr reports a fetch that failed because the function's consumer or the trigger
// stream is gone (deleted by hand, or lost with a server's store). A request that nothing
// answers means the same: the consumer it was sent to no longer exists.
func vanishedErr(err error) bool {
	return errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) ||
		errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

// consumerGone asks the server whether a function's consumer still exists after a fetch failed
// for no stated reason. It returns the server's "not found" answer when the consumer or its
// stream is gone, and nil when the consumer is there or the question got no answer (the fetch
// is then simply retried, and asks again if it fails again).
func (h *Host) consumerGone(ctx context.Context, s *served) error {
	if !h.nc.IsConnected() {
		// No server to ask: waiting for an answer would only hold the retry back once NATS is
		// back, and a fetch then says what it finds.
		return nil
	}
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := s.cons().Info(ictx)
	if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("consumer info after a failed fetch: %w", err)
	}
	return nil
}

// rebind recreates the stream and consumer of a function after someone deleted them.
func (h *Host) rebind(ctx context.Context, f *functions.Function) (jetstream.Consumer, error) {
	stream, err := bus.EnsureRunStream(ctx, h.js, f.Subjects(), h.cfg.Streams)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.stream, h.captured = stream, stream.CachedInfo().Config.Subjects
	h.mu.Unlock()
	return bus.EnsureConsumer(ctx, stream, f.Name, f.Subjects(), h.cfg.AckWait, f.Spec.Queue)
}

// fetchExpiry is how long one pull waits for a message; fetchHeartbeat how often the server
// says, meanwhile, that the pull is still there. Each pull and each heartbeat costs the server
// and the host a little, and an idle host waits with one pull per function, so these two set
// most of what it spends doing nothing: at 30 s / 5 s with a pull per slot, 200 idle functions
// of 2 slots drew 66 heartbeats and 28 pulls and expiries a second, and with the rest over 6%
// of a core (now: about 7 messages a second, 0.5-0.7%). A pull lost some other way is renewed at once
// instead (renewPulls): when the connection comes back (a restarted server forgot its pulls),
// when the trigger stream or a function's consumer is deleted, or elects a new leader (its
// waiting pulls stayed with the old one). Two missed heartbeats remain the backstop for a
// loss nothing announces.
const (
	fetchExpiry    = 2 * time.Minute
	fetchHeartbeat = 30 * time.Second
)

// pullGeneration ends, and is replaced, when the pulls waiting under it must be sent again.
type pullGeneration struct {
	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc
}

func (g *pullGeneration) current() context.Context {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ctx == nil {
		g.ctx, g.cancel = context.WithCancel(context.Background())
	}
	return g.ctx
}

func (g *pullGeneration) renew() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cancel != nil {
		g.cancel()
	}
	g.ctx, g.cancel = context.WithCancel(context.Background())
}

// renewPulls sends waiting pulls again when they may be lost without a word, until ctx ends:
// every pull when the connection comes back or the trigger stream is deleted or elects a
// leader; a function's when its consumer is deleted or elects a leader. The advisories are
// JetStream's own ($JS.EVENT.ADVISORY.*); a NATS that does not let the hosts read them leaves
// the heartbeats to notice.
func (h *Host) renewPulls(ctx context.Context) {
	status := h.nc.StatusChanged(nats.CONNECTED)
	defer h.nc.RemoveStatusListener(status)
	advisories := make(chan *nats.Msg, 64)
	for _, subject := range []string{
		"$JS.EVENT.ADVISORY.STREAM.DELETED." + bus.RunStream,
		"$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED." + bus.RunStream,
		"$JS.EVENT.ADVISORY.CONSUMER.DELETED." + bus.RunStream + ".*",
		"$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED." + bus.RunStream + ".*",
	} {
		sub, err := h.nc.ChanSubscribe(subject, advisories)
		if err != nil {
			h.log.Warn("cannot follow JetStream's advisories; a pull lost with a consumer's leader is noticed by its heartbeats",
				zap.String("subject", subject), zap.Error(err))
			continue
		}
		defer sub.Unsubscribe()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-status:
			h.pulls.renew()
			h.log.Info("reconnected to NATS: every waiting pull is sent again")
		case m := <-advisories:
			kind, consumer := advisoryOf(m.Subject)
			if consumer == "" {
				h.pulls.renew()
				h.log.Info("the trigger stream changed; every waiting pull is sent again", zap.String("advisory", kind))
				continue
			}
			for _, s := range h.servedSnapshot() {
				if bus.ConsumerName(s.fn.Name) == consumer {
					s.pulls.renew()
					h.log.Info("a function's consumer changed; its waiting pulls are sent again",
						zap.String("function", s.fn.Name), zap.String("advisory", kind))
				}
			}
		}
	}
}

// advisoryOf reads an advisory's subject: its kind (DELETED, LEADER_ELECTED) and the consumer
// it is about, "" for the stream's own.
func advisoryOf(subject string) (kind, consumer string) {
	parts := strings.Split(subject, ".")
	// $JS EVENT ADVISORY STREAM|CONSUMER <kind> <stream> [<consumer>]
	if len(parts) < 6 {
		return "", ""
	}
	if parts[3] == "CONSUMER" && len(parts) == 7 {
		return parts[4], parts[6]
	}
	return parts[4], ""
}

func (h *Host) fetchOne(ctx context.Context, s *served) error {
	fctx, cancel := context.WithTimeout(ctx, fetchExpiry)
	defer cancel()
	defer context.AfterFunc(h.pulls.current(), cancel)()
	defer context.AfterFunc(s.pulls.current(), cancel)()
	batch, err := s.cons().Fetch(1, jetstream.FetchContext(fctx), jetstream.FetchHeartbeat(fetchHeartbeat))
	if err != nil {
		return fmt.Errorf("fetch: %w", err)
	}
	for msg := range batch.Messages() {
		if ctx.Err() != nil {
			// Delivered just as this slot was told to stop: hand it straight back.
			if err := msg.Nak(); err != nil {
				h.log.Warn("cannot hand back a message taken while stopping; JetStream delivers it again after the ack wait",
					zap.String("function", s.fn.Name), zap.Error(err))
			}
			continue
		}
		s.took()
		h.handle(s, msg)
		s.finished()
	}
	if err := batch.Error(); err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && !errors.Is(err, jetstream.ErrNoMessages) {
		return fmt.Errorf("fetch: %w", err)
	}
	return nil
}

// publishTick sends the trigger of one scheduled tick. Its message id is the same on every host,
// so the stream keeps one trigger per tick however many hosts serve the function.
func (h *Host) publishTick(ctx context.Context, function string, tick time.Time) error {
	msgID := h.ids.Tick(function, tick)
	m := nats.NewMsg(bus.RunSubject(function))
	m.Data = []byte("{}")
	m.Header.Set(bus.HeaderMsgID, msgID)
	m.Header.Set(bus.HeaderScheduledAt, tick.UTC().Format(time.RFC3339))
	ack, err := h.js.PublishMsg(ctx, m)
	if err != nil {
		return fmt.Errorf("publish tick of %s: %w", function, err)
	}
	if !ack.Duplicate {
		h.log.Info("scheduled run triggered", zap.String("function", function), zap.Time("tick", tick), zap.String("job_id", msgID))
	}
	return nil
}
