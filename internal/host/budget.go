package host

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/budget"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/retry"
	"github.com/agenthost/host/internal/route"
)

// reserve makes room for the next steps of rec's job before any of them is published, so
// that nothing one message starts is unbounded (issue 37):
//
//   - a map (an each edge) is refused whole when its items do not fit the room its target's
//     queue: has left. Its items are published at once, by design (a thousand disk syncs one
//     after another otherwise); the queue cannot hold some back, so the step does not start
//     them.
//   - the flow's jobs are counted against --flow-max-jobs (package budget), nested maps
//     multiplied: one write per step that has next steps, whatever their number.
//
// Either refusal is a *jobtype.TerminalError: the same result would be refused again, so the
// step fails for good (dead letter, error event) rather than running again. Any other error is
// the store not answering, retried here until ctx ends.
func (h *Host) reserve(ctx context.Context, rec *jobs.Record, routes []route.Message) error {
	if len(routes) == 0 {
		return nil
	}
	if err := h.checkMaps(ctx, routes); err != nil {
		return err
	}
	if h.cfg.FlowMaxJobs < 0 || h.budget == nil {
		return nil
	}
	_, err := retry.Do(ctx, retry.Publish, func() (struct{}, error) {
		err := h.budget.Reserve(ctx, rec.FlowID, h.ids.Derive(rec.ID, "budget"), len(routes), h.cfg.FlowMaxJobs, rec.Attempts > 1)
		var over *budget.OverError
		if errors.As(err, &over) {
			h.m.flowBudgetRefused.Inc()
			return struct{}{}, retry.Permanent(&jobtype.TerminalError{Err: err})
		}
		return struct{}{}, err
	})
	return err
}

// checkMaps refuses a map whose items do not fit the room left in a queue: of a function
// listening on its subject: the limit less the triggers it holds, waiting or running. The
// consumers are read only for a step that maps, once for all its maps.
func (h *Host) checkMaps(ctx context.Context, routes []route.Message) error {
	var maps []route.Message // one per subject: Count is the map's size
	for _, r := range routes {
		if r.Count > 0 && !slices.ContainsFunc(maps, func(m route.Message) bool { return m.Subject == r.Subject }) {
			maps = append(maps, r)
		}
	}
	if len(maps) == 0 {
		return nil
	}
	h.mu.Lock()
	stream := h.stream
	h.mu.Unlock()
	if stream == nil {
		return nil
	}
	infos, err := retry.Do(ctx, retry.Publish, func() ([]*jetstream.ConsumerInfo, error) {
		var infos []*jetstream.ConsumerInfo
		l := stream.ListConsumers(ctx)
		for info := range l.Info() {
			if bus.QueueLimit(info.Config) > 0 {
				infos = append(infos, info)
			}
		}
		if err := l.Err(); err != nil {
			return nil, fmt.Errorf("read the queue: limits of the functions a map goes to: %w", err)
		}
		return infos, nil
	})
	if err != nil {
		return err
	}
	for _, m := range maps {
		for _, info := range infos {
			if !listensOn(info.Config, m.Subject) {
				continue
			}
			limit := bus.QueueLimit(info.Config)
			held := int(info.NumPending) + info.NumAckPending
			if room := max(limit-held, 0); m.Count > room {
				h.m.flowBudgetRefused.Inc()
				return &jobtype.TerminalError{Err: fmt.Errorf(
					"the each edge to %s maps %d items, but the function %s listening there has room for %d (queue: %d, %d triggers waiting or running); "+
						"a map's items are queued at once, so none was: map over fewer items, or raise its queue:",
					m.Subject, m.Count, functionOf(info.Name), room, limit, held)}
			}
		}
	}
	return nil
}

// listensOn reports whether a consumer takes messages on subject.
func listensOn(cfg jetstream.ConsumerConfig, subject string) bool {
	filters := cfg.FilterSubjects
	if cfg.FilterSubject != "" {
		filters = append(filters, cfg.FilterSubject)
	}
	return slices.ContainsFunc(filters, func(f string) bool { return bus.SubjectMatches(f, subject) })
}

// functionOf is the function a consumer runs (bus.ConsumerName).
func functionOf(consumer string) string {
	if len(consumer) > 3 && consumer[:3] == "fn_" {
		return consumer[3:]
	}
	return consumer
}
