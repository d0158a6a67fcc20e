// Package schedule fires `schedule:` functions. Every host that serves a scheduled function runs
// its timer and computes the same tick times, so the publisher can give each tick a message id
// that is the same on every host, and JetStream keeps exactly one trigger per tick however many
// hosts serve it.
package schedule

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/robfig/cron/v3"
	"go.uber.org/zap"
)

// Publish sends the trigger of one tick; every host calls it with the same tick time.
type Publish func(ctx context.Context, function string, tick time.Time) error

// Scheduler runs one timer per scheduled function.
type Scheduler struct {
	log     *zap.Logger
	publish Publish
	parse   func(string) (cron.Schedule, error)

	mu      sync.Mutex
	running map[string]*timer
	paused  map[string]*Pause
	store   *Store // nil: no pauses, nothing recorded
	wg      sync.WaitGroup
}

type timer struct {
	expr   string
	cancel context.CancelFunc
}

// New returns a scheduler; parse turns an expression into a schedule (Parse).
func New(log *zap.Logger, parse func(string) (cron.Schedule, error), publish Publish) *Scheduler {
	return &Scheduler{log: log, publish: publish, parse: parse, running: map[string]*timer{}, paused: map[string]*Pause{}}
}

// Watch makes the scheduler follow the pauses of st (`host schedules pause`) and record each
// schedule and its ticks there, until ctx ends. It returns once the recorded pauses are known, so that a host
// that starts never fires a tick of a schedule paused before it started. Call it before Set.
func (s *Scheduler) Watch(ctx context.Context, st *Store) error {
	ready := make(chan struct{})
	if err := st.watchPauses(ctx, s.SetPaused, ready); err != nil {
		return err
	}
	wait := time.NewTimer(30 * time.Second)
	defer wait.Stop()
	select {
	case <-ready:
	case <-wait.C:
		return fmt.Errorf("read schedule pauses from bucket %s: no answer within 30s; check that NATS is reachable", Bucket)
	case <-ctx.Done():
		return fmt.Errorf("read schedule pauses: %w", ctx.Err())
	}
	s.mu.Lock()
	s.store = st
	s.mu.Unlock()
	return nil
}

// SetPaused pauses function's ticks (p says who paused it), or resumes them when p is nil. A
// paused schedule keeps its timer and skips the ticks, so a resume fires on the next tick of
// the same calendar, never a burst of the skipped ones.
func (s *Scheduler) SetPaused(function string, p *Pause) {
	s.mu.Lock()
	_, was := s.paused[function]
	if p == nil {
		delete(s.paused, function)
	} else {
		s.paused[function] = p
	}
	s.mu.Unlock()
	switch {
	case p != nil && !was:
		s.log.Info("schedule paused", zap.String("function", function), zap.String("by", p.By), zap.Time("at", p.At))
	case p == nil && was:
		s.log.Info("schedule resumed", zap.String("function", function))
	}
}

func (s *Scheduler) isPaused(function string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.paused[function]
	return ok
}

// record writes a schedule (and a tick, unless zero) to the store, if there is one. What it
// writes is for listings only, so a failure costs no tick.
func (s *Scheduler) record(ctx context.Context, function, expr string, tick time.Time) {
	s.mu.Lock()
	st := s.store
	s.mu.Unlock()
	if st == nil {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := st.record(rctx, function, expr, tick); err != nil {
		s.log.Debug("schedule not recorded for `host schedules`", zap.String("function", function), zap.Error(err))
	}
}

// Next is the first tick strictly after now. Ticks are computed in UTC (unless the expression
// sets CRON_TZ) and `@every` intervals are aligned to the Unix epoch, so hosts agree on tick
// times whatever their time zone and whenever they started.
func Next(s cron.Schedule, now time.Time) time.Time {
	if every, ok := s.(cron.ConstantDelaySchedule); ok {
		return now.Truncate(every.Delay).Add(every.Delay)
	}
	return s.Next(now.UTC())
}

// Set starts the schedule of function, or replaces it when the expression changed.
func (s *Scheduler) Set(ctx context.Context, function, expr string) error {
	sched, err := s.parse(expr)
	if err != nil {
		return fmt.Errorf("schedule %q of %s: %w", expr, function, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.running[function]; ok {
		if t.expr == expr {
			return nil
		}
		t.cancel()
	}
	tctx, cancel := context.WithCancel(ctx)
	s.running[function] = &timer{expr: expr, cancel: cancel}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.record(tctx, function, expr, time.Time{})
		s.loop(tctx, function, expr, sched)
	}()
	s.log.Info("schedule started", zap.String("function", function), zap.String("schedule", expr), zap.Time("next", Next(sched, time.Now())))
	return nil
}

// Remove stops the schedule of function, if it has one.
func (s *Scheduler) Remove(function string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.running[function]; ok {
		t.cancel()
		delete(s.running, function)
		s.log.Info("schedule stopped", zap.String("function", function))
	}
}

// Functions lists the functions with a running schedule.
func (s *Scheduler) Functions() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.running))
	for f := range s.running {
		out = append(out, f)
	}
	return out
}

// Stop ends every schedule and waits for the timers to return.
func (s *Scheduler) Stop() {
	s.mu.Lock()
	for f, t := range s.running {
		t.cancel()
		delete(s.running, f)
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// loop fires ticks until ctx ends. The next tick is always computed from the current time, so
// a host that was down, or a process that was paused, does not fire a burst of missed ticks.
func (s *Scheduler) loop(ctx context.Context, function, expr string, sched cron.Schedule) {
	for {
		tick := Next(sched, time.Now())
		if tick.IsZero() {
			s.log.Warn("schedule has no next tick; stopping it", zap.String("function", function))
			return
		}
		t := time.NewTimer(time.Until(tick))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if s.isPaused(function) {
			s.log.Info("scheduled tick skipped: the schedule is paused (`host schedules resume` resumes it)", zap.String("function", function), zap.Time("tick", tick))
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := s.publish(pctx, function, tick)
		cancel()
		if err != nil {
			s.log.Error("scheduled trigger not published; the next tick is unaffected", zap.String("function", function), zap.Time("tick", tick), zap.Error(err))
			continue
		}
		s.record(ctx, function, expr, tick)
	}
}
