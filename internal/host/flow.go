package host

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/jobtype"
)

// Flow control (limit:, rate:) across every host: a job over its function's limit is handed
// back to JetStream with a short delay (verdict held), holding no run slot, its record queued
// with the reason, and looks again when it comes back; the deliveries it spends waiting are not
// attempts (its record's Deferrals). The state is package flowctl's: leases a host renews while
// its job runs, so a dead host's keys free themselves within Config.FlowLease.
//
// A job starts at most once however many hosts look at once: taking a limit's room is a
// compare-and-set on the key's entry, and the start itself is the claim, the compare-and-set
// of the job's record from queued to running (jobs.Store.Move), which only one delivery wins.

// Poll bounds of a held job: the first look again after flowPollMin, doubling to flowPollMax.
// A run of its key that ends is seen by the waiting jobs within flowPollMax.
const (
	flowPollMin = 100 * time.Millisecond
	flowPollMax = 2 * time.Second
)

// hasFlowControl says whether f's messages may wait for flow control.
func hasFlowControl(f *functions.Function) bool {
	return f.Spec.Limit != nil || f.Spec.Rate != nil || f.Spec.Debounce != nil || f.Spec.Priority != nil
}

// holdFlow takes the job's room under its function's limit: and a start under its rate:,
// returning how to give the room back when the job has ended. When the job may not start now,
// ok is false and e is its end: held (it looks again later) or failed (a key's expression
// fails on its arguments). The limit comes first: a start counted against the rate is spent
// even when the job then waits, a limit's room is given back.
func (h *Host) holdFlow(j *job) (release func(), e end, ok bool) {
	// Debounce first: a message superseded or still in its quiet period takes no limit room
	// and spends no start of the rate.
	if e, ok := h.holdDebounce(j); !ok {
		return func() {}, e, false
	}
	if e, ok := h.holdPriority(j); !ok {
		return func() {}, e, false
	}
	release, e, ok = h.holdLimit(j)
	if !ok {
		h.markPriority(j, e)
		return release, e, ok
	}
	if e, ok := h.takeRate(j); !ok {
		release()
		return func() {}, e, false
	}
	h.waiters.done(j.rec.ID)
	return release, end{}, true
}

// takeRate counts the job's start under its function's rate:, when it has one; the job's start
// is the time counted.
func (h *Host) takeRate(j *job) (end, bool) {
	r := j.s.fn.Spec.Rate
	if r == nil {
		return end{}, true
	}
	fn := j.s.fn
	key, err := fn.RateKey.Eval(j.msg.Data())
	if err != nil {
		h.waiters.done(j.rec.ID)
		return end{verdict: failed, err: jobtype.Terminal(err)}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, at, err := h.flow.Start(ctx, fn.Name, key, r.N, r.Period)
	switch {
	case err != nil:
		h.log.Warn("cannot read the function's rate: state; the job waits and looks again", zap.String("function", fn.Name), zap.String("job_id", j.rec.ID), zap.Error(err))
		return h.heldEnd(j, "rate", fmt.Sprintf("waiting for rate: the flow-control store did not answer (%v)", err)), false
	case !got:
		e := h.heldEnd(j, "rate", rateReason(fn, key, at))
		// Its turn is known: look again then rather than on the poll's schedule.
		e.due = at.Add(rand.N(flowPollMin))
		return e, false
	}
	j.rec.Started = at
	return end{}, true
}

// rateReason is what a job waiting for its rate's turn says: "waiting for rate: 5/1s, next
// start at 12:00:01.250".
func rateReason(fn *functions.Function, key string, at time.Time) string {
	r := fn.Spec.Rate
	of := ""
	if fn.RateKey != nil {
		of = fmt.Sprintf("%s=%s, ", fn.RateKey.Label(), key)
	}
	return fmt.Sprintf("waiting for rate: %s%d/%s, next start at %s", of, r.N, r.Period, at.UTC().Format("15:04:05.000"))
}

// holdLimit takes the job's room under its function's limit:, when it has one.
func (h *Host) holdLimit(j *job) (release func(), e end, ok bool) {
	noop := func() {}
	l := j.s.fn.Spec.Limit
	if l == nil {
		return noop, end{}, true
	}
	fn := j.s.fn
	key, err := fn.LimitKey.Eval(j.msg.Data())
	if err != nil {
		h.waiters.done(j.rec.ID)
		return noop, end{verdict: failed, err: jobtype.Terminal(err)}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, running, err := h.flow.Acquire(ctx, fn.Name, key, j.rec.ID, h.cfg.HostID, l.N, h.cfg.FlowLease)
	switch {
	case err != nil:
		h.log.Warn("cannot read the function's limit: state; the job waits and looks again", zap.String("function", fn.Name), zap.String("job_id", j.rec.ID), zap.Error(err))
		return noop, h.heldEnd(j, "limit", fmt.Sprintf("waiting for limit: the flow-control store did not answer (%v)", err)), false
	case !got:
		return noop, h.heldEnd(j, "limit", limitReason(fn, key, running)), false
	}
	// Its start is now, not its delivery: a run of its key may have ended in between.
	j.rec.Started = time.Now()
	stop := h.renewLease(fn.Name, key, j.rec.ID)
	return func() {
		stop()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.flow.Release(ctx, fn.Name, key, j.rec.ID); err != nil {
			h.log.Warn("cannot give back the job's limit: key; it frees itself when its lease runs out",
				zap.String("function", fn.Name), zap.String("job_id", j.rec.ID), zap.Duration("lease", h.cfg.FlowLease), zap.Error(err))
		}
	}, end{}, true
}

// limitReason is what a held job's record says: "waiting for limit: repo=acme/api, 1 running".
func limitReason(fn *functions.Function, key string, running int) string {
	if fn.LimitKey == nil {
		return fmt.Sprintf("waiting for limit: %d running (limit: %d)", running, fn.Spec.Limit.N)
	}
	return fmt.Sprintf("waiting for limit: %s=%s, %d running", fn.LimitKey.Label(), key, running)
}

// heldEnd hands the job back to look again after its next poll delay.
func (h *Host) heldEnd(j *job, kind, why string) end {
	h.waiters.wait(j.rec.ID, j.s.fn.Name, kind)
	d := flowPollMin << min(j.rec.Deferrals, 5)
	d = min(d, flowPollMax)
	d += rand.N(d/4 + 1) // hosts that looked at once look again apart
	return end{verdict: held, due: time.Now().Add(d), held: why}
}

// heldStatus is the status a held job's record keeps: queued for one that never ran, retrying
// for one whose earlier attempt ran (a record never goes back to queued), and for one whose
// record says running, whose host died with it.
func heldStatus(from jobtype.Status) jobtype.Status {
	switch from {
	case jobtype.None, jobtype.Queued:
		return jobtype.Queued
	}
	return jobtype.Retrying
}

// renewLease keeps the job's hold on its key for as long as it runs; stop ends it.
func (h *Host) renewLease(function, key, job string) (stop func()) {
	return every(h.cfg.FlowLease/3, func() {
		ctx, cancel := context.WithTimeout(context.Background(), h.cfg.FlowLease/3)
		held, err := h.flow.Renew(ctx, function, key, job, h.cfg.HostID, h.cfg.FlowLease)
		cancel()
		switch {
		case err != nil:
			h.log.Warn("cannot renew the job's limit: lease; it runs on, and its key frees itself if this goes on past the lease",
				zap.String("function", function), zap.String("job_id", job), zap.Error(err))
		case !held:
			h.log.Warn("the job's limit: lease ran out while it ran (NATS was out of reach for longer than the lease); another run of its key may start",
				zap.String("function", function), zap.String("job_id", job), zap.Duration("lease", h.cfg.FlowLease))
		}
	})
}

// waiters are the jobs this host handed back to wait for flow control, for the gauge. A job
// another host takes next is forgotten here after waiterStale without being seen again.
type waiters struct {
	mu    sync.Mutex
	jobs  map[string]waiter
	gauge *prometheus.GaugeVec
}

type waiter struct {
	function, kind string
	seen           time.Time
}

// waiterStale is how long a waiting job unseen by this host still counts here: past its
// longest poll, it has been taken by another host.
const waiterStale = 3 * flowPollMax

func newWaiters(g *prometheus.GaugeVec) *waiters {
	return &waiters{jobs: map[string]waiter{}, gauge: g}
}

func (w *waiters) wait(job, function, kind string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if old, ok := w.jobs[job]; !ok {
		w.gauge.WithLabelValues(function, kind).Inc()
	} else if old.kind != kind {
		w.gauge.WithLabelValues(old.function, old.kind).Dec()
		w.gauge.WithLabelValues(function, kind).Inc()
	}
	w.jobs[job] = waiter{function: function, kind: kind, seen: time.Now()}
}

func (w *waiters) done(job string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if old, ok := w.jobs[job]; ok {
		w.gauge.WithLabelValues(old.function, old.kind).Dec()
		delete(w.jobs, job)
	}
}

// sweep forgets, until ctx ends, the waiting jobs this host has not seen for waiterStale.
func (w *waiters) sweep(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.mu.Lock()
		for job, old := range w.jobs {
			if time.Since(old.seen) > waiterStale {
				w.gauge.WithLabelValues(old.function, old.kind).Dec()
				delete(w.jobs, job)
			}
		}
		w.mu.Unlock()
	}
}
