package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/retry"
)

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
		err := h.fetchOne(ctx, s, false)
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
	return bus.EnsureConsumer(ctx, stream, f.Name, f.Subjects(), h.cfg.AckWait, f.Spec.Queue, bus.WaitsForFlow(hasFlowControl(f)))
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

// fetchOne takes one message and handles it; scout: for the priority scout (see scoutLoop).
func (h *Host) fetchOne(ctx context.Context, s *served, scout bool) error {
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
		h.handle(s, msg, scout)
		s.finished()
	}
	if err := batch.Error(); err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && !errors.Is(err, jetstream.ErrNoMessages) {
		return fmt.Errorf("fetch: %w", err)
	}
	return nil
}
