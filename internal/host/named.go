package host

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/schedule"
)

// namedSchedules fires the named schedules (`host schedules add`, the dashboard's Schedules
// page) of the functions this host serves. Every host follows the bucket and runs a timer per
// schedule; a tick's message id is the same on every host, so JetStream keeps one trigger per
// tick however many hosts serve the function. Pauses are part of the entry.
type namedSchedules struct {
	h     *Host
	store *schedule.Store
	timer *schedule.Scheduler

	mu   sync.Mutex
	defs map[string]schedule.Named
}

// followNamed starts firing the named schedules and following their changes until ctx ends; it
// returns once those recorded are known.
func (h *Host) followNamed(ctx context.Context, st *schedule.Store) (*namedSchedules, error) {
	ns := &namedSchedules{h: h, store: st, defs: map[string]schedule.Named{}}
	ns.timer = schedule.New(h.log.With(zap.String("schedules", "named")), annot.ParseSchedule, ns.publish)
	err := st.WatchNamed(ctx, func(name string, n *schedule.Named) {
		ns.mu.Lock()
		if n == nil {
			delete(ns.defs, name)
		} else {
			ns.defs[name] = *n
		}
		ns.mu.Unlock()
		if n == nil {
			ns.timer.Remove(name)
			ns.timer.SetPaused(name, nil)
			return
		}
		var p *schedule.Pause
		if n.Paused {
			p = &schedule.Pause{By: n.PausedBy, At: n.PausedAt}
		}
		ns.timer.SetPaused(name, p)
		if err := ns.timer.Set(ctx, name, n.Schedule); err != nil {
			h.log.Error("named schedule not started", zap.String("schedule", name), zap.Error(err))
		}
	})
	if err != nil {
		return nil, err
	}
	return ns, nil
}

// stop ends every timer.
func (ns *namedSchedules) stop() {
	if ns != nil {
		ns.timer.Stop()
	}
}

// publish sends the trigger of one tick of schedule name: its arguments to its function, on a
// host that serves the function (another host fires it otherwise), started by "schedule <name>".
func (ns *namedSchedules) publish(ctx context.Context, name string, tick time.Time) error {
	ns.mu.Lock()
	n, ok := ns.defs[name]
	ns.mu.Unlock()
	if !ok || ns.h.servedFn(n.Function) == nil {
		return nil
	}
	h := ns.h
	m := nats.NewMsg(bus.RunSubject(n.Function))
	m.Data = n.Args
	if len(m.Data) == 0 {
		m.Data = []byte("{}")
	}
	msgID := h.ids.Derive("tick", "named."+name, strconv.FormatInt(tick.Unix(), 10))
	m.Header.Set(bus.HeaderMsgID, msgID)
	ids.Vouch(m, h.ids.Derive, "schedule "+name, "")
	ack, err := h.js.PublishMsg(ctx, m)
	if err != nil {
		return fmt.Errorf("publish tick of schedule %s to %s: %w", name, n.Function, err)
	}
	if !ack.Duplicate {
		h.log.Info("named schedule triggered", zap.String("schedule", name), zap.String("function", n.Function), zap.Time("tick", tick), zap.String("job_id", msgID))
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := ns.store.RecordNamedTick(rctx, name, tick); err != nil {
			h.log.Debug("named schedule's tick not recorded for listings", zap.String("schedule", name), zap.Error(err))
		}
	}
	return nil
}
