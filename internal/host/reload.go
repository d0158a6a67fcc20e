package host

import (
	"context"
	"slices"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/functions"
)

// reload reads the functions directory and makes the served set match it: new functions start,
// changed ones are replaced, deleted ones stop, and a refused file leaves the function's last
// good version serving (or none). Running jobs are never interrupted.
func (h *Host) reload(ctx context.Context) error {
	fns, refusals := h.load(ctx, h.functionsDir())
	return h.apply(ctx, fns, refusals, h.deployment())
}

// load reads dir's functions and refuses what `host check` refuses. A function whose file is
// refused keeps the version this host serves, if it serves one: a broken edit does not take a
// working function away.
func (h *Host) load(ctx context.Context, dir string) (map[string]*functions.Function, []Refusal) {
	fns, errs := functions.Load(dir)
	if fns == nil {
		fns = map[string]*functions.Function{}
	}
	errs = append(errs, h.checkAll(ctx, fns)...)
	errs = append(errs, functions.RefuseNetworkHost(fns, h.cfg.AllowNetworkHost)...)
	refusals := make([]Refusal, 0, len(errs))
	for _, err := range errs {
		r := refusal(dir, err)
		if s := h.servedFn(r.Function); s != nil && fns[r.Function] == nil {
			fns[r.Function] = s
			r.Kept = s.Hash
		}
		h.log.Error("function refused; fix the file and it is picked up again", zap.String("function", r.Function), zap.String("kept_version", r.Kept), zap.Error(err))
		refusals = append(refusals, r)
	}
	h.m.refused.Set(float64(len(errs)))
	return fns, refusals
}

// apply makes the served set fns, which deployment (0: a directory) holds, and says which
// files were refused.
func (h *Host) apply(ctx context.Context, fns map[string]*functions.Function, refusals []Refusal, deployment int) error {
	if err := h.serveSet(ctx, fns); err != nil {
		return err
	}
	h.noteRefusals(ctx, refusals, deployment)
	return nil
}

// serveSet makes the served set fns.
func (h *Host) serveSet(ctx context.Context, fns map[string]*functions.Function) error {
	var subjects []string
	for _, f := range fns {
		subjects = append(subjects, f.Subjects()...)
	}
	for _, r := range h.cfg.Routers {
		subjects = append(subjects, r.Route(fns)...)
	}
	stream, err := bus.EnsureRunStream(ctx, h.js, subjects, h.cfg.Streams)
	if err != nil {
		return err
	}
	if h.cfg.Served != nil {
		h.cfg.Served(fns) // after the stream takes their subjects, before any lock
	}
	warnUnheardNext(h.log, fns)
	warnUnservedJoins(h.log, fns)
	h.warnUnknownGroups(ctx, fns)
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
