package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
)

// queueGroup makes every host share the core subscriptions, so a call is forwarded once.
const queueGroup = "agent-host"

func (h *Host) subscribe() error {
	calls, err := h.nc.QueueSubscribe(bus.CallPrefix+"*", queueGroup, func(m *nats.Msg) {
		// Forwarding waits for JetStream's ack; doing it in its own goroutine keeps one slow
		// store write from holding up every other caller.
		go h.forwardCall(m)
	})
	if err != nil {
		return fmt.Errorf("subscribe to %s*: %w", bus.CallPrefix, err)
	}
	runs, err := h.nc.QueueSubscribe(bus.RunPrefix+"*", queueGroup+"-unknown", func(m *nats.Msg) {
		name := strings.TrimPrefix(m.Subject, bus.RunPrefix)
		if h.isServed(name) {
			return
		}
		go h.reportUnknown(m, name)
	})
	if err != nil {
		return fmt.Errorf("subscribe to %s*: %w", bus.RunPrefix, err)
	}
	// Cancels are answered through the drain too (Shutdown ends them last): a job a draining
	// host still runs can be stopped.
	if h.cancels, err = h.subscribeCancel(); err != nil {
		return err
	}
	decisions, err := h.subscribeDecisions()
	if err != nil {
		return err
	}
	vouch, err := h.subscribeVouch()
	if err != nil {
		return err
	}
	h.subs = append(append(h.subs, calls, runs, vouch), decisions...)
	// Ready must mean the server routes calls here: wait until it has the subscriptions.
	if err := h.nc.Flush(); err != nil {
		return fmt.Errorf("subscribe to calls: %w", err)
	}
	return nil
}

func (h *Host) isServed(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.served[name]
	return ok
}

// consumerOf looks up a function's consumer, which exists once any host has served it.
func (h *Host) consumerOf(ctx context.Context, name string) (jetstream.Consumer, error) {
	h.mu.Lock()
	stream := h.stream
	h.mu.Unlock()
	return stream.Consumer(ctx, bus.ConsumerName(name))
}

// servedAnywhere reports whether a trigger for name will ever run: some host has served it,
// so its consumer holds the message until a host takes it.
func (h *Host) servedAnywhere(ctx context.Context, name string) bool {
	if h.isServed(name) {
		return true
	}
	_, err := h.consumerOf(ctx, name)
	return err == nil || !errors.Is(err, jetstream.ErrConsumerNotFound)
}

// servedNow reports whether some host serves name: this one, or one that announced it and has
// not withdrawn it. A caller waits for a reply, so a function deleted everywhere must be
// refused at once rather than queued for nobody.
func (h *Host) servedNow(ctx context.Context, name string) bool {
	return h.isServed(name) || len(h.announced(ctx, name)) > 0
}

// checkQueue refuses a call (agent.call, and so MCP's tool calls) for a function whose queue:
// limit is reached, as `host invoke` and POST /run do. A function this host serves without a
// queue: costs nothing; any other needs its consumer read.
func (h *Host) checkQueue(ctx context.Context, name string) error {
	h.mu.Lock()
	s, here := h.served[name]
	h.mu.Unlock()
	if here && s.fn.Spec.Queue == 0 {
		return nil
	}
	cons, err := h.consumerOf(ctx, name)
	if err != nil {
		return nil // not served anywhere yet, or NATS slow: the publish below says what it says
	}
	return bus.CheckQueue(name, cons.CachedInfo())
}

// forwardCall turns an agent.call request into a durable agent.run message that remembers the
// caller's inbox; whichever host runs the job answers there.
func (h *Host) forwardCall(m *nats.Msg) {
	name := strings.TrimPrefix(m.Subject, bus.CallPrefix)
	if m.Reply != "" && !bus.SafeReply(m.Reply, h.isCaptured) {
		// Nothing is queued and nothing answered: answering would be the very publish refused.
		h.log.Warn("call refused: its reply subject is not an inbox; a request's reply subject must be one (as `nats req` makes), never a subject that acts",
			zap.String("function", name), zap.String("reply", m.Reply))
		h.m.runs.WithLabelValues(name, "refused").Inc()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.AckWait)
	defer cancel()
	id := callerID(m.Header)
	if !h.servedNow(ctx, name) {
		h.respondError(m, id, name, fmt.Sprintf("no function named %q is served; add functions/%s.<ext> (see `host check`)", name, name)+h.refusedText(ctx, name))
		return
	}
	if err := h.checkQueue(ctx, name); err != nil {
		h.m.runs.WithLabelValues(name, "refused").Inc()
		h.respondError(m, id, name, err.Error())
		return
	}
	run := nats.NewMsg(bus.RunSubject(name))
	run.Data = m.Data
	bus.CarryHeaders(run.Header, m.Header)
	run.Header.Set(bus.HeaderMsgID, id)
	// Reply-To is the host's to set: the inbox of this request, signed, or nothing. A caller's
	// own Reply-To (or one on a request without an inbox) never travels on.
	if m.Reply != "" {
		run.Header.Set(bus.HeaderReplyTo, m.Reply)
		run.Header.Set(bus.HeaderReplySig, h.ids.ReplySig(name, id, m.Reply))
	}
	queued := h.queue(ctx, run, id, name)
	run.Header.Set(bus.HeaderQueued, "1")
	ack, err := h.js.PublishMsg(ctx, run)
	if err != nil {
		msg := fmt.Sprintf("could not queue the job: %v; try again", err)
		queued.failed(msg)
		h.respondError(m, id, name, msg)
		return
	}
	if ack.Duplicate {
		// The job under this id is the one already in the stream, perhaps another function's:
		// the record written for this call is not its to keep.
		queued.withdraw()
		h.answerRepeat(ctx, m, id, name)
	}
}

// queued is the queued record a host writes for a job it is about to publish.
type queued struct {
	h   *Host
	ctx context.Context
	rec *jobs.Record
	ack jetstream.PubAckFuture // nil: it could not be sent
}

// queue writes the queued record of a job about to be published, so that `host job <id>` and
// `host cancel <id>` know it from the moment it is accepted. It never writes over a record the
// job already has (a repeated id, or the host that took the job already): the write is a
// create. It does not wait for the store, to keep a disk sync off every call's path; the
// create's check makes its order against the host's own writes irrelevant.
func (h *Host) queue(ctx context.Context, trigger *nats.Msg, id, name string) *queued {
	lin := readLineage(trigger.Header, id)
	q := &queued{h: h, ctx: ctx, rec: &jobs.Record{ID: id, Function: name, FlowID: lin.flow, ParentJob: lin.parent, ReplayedFrom: lin.replayOf,
		Caller: lin.caller, Subject: trigger.Subject, Hop: lin.hop, Status: jobtype.Queued, Enqueued: time.Now()}}
	q.rec.KeepArgs(trigger.Data)
	q.rec.StartedBy, q.rec.Starter = h.startOf(trigger.Header, trigger.Data, name, time.Time{})
	var err error
	if q.ack, err = h.jobs.CreateAsync(q.rec); err != nil {
		h.log.Warn("cannot write the queued job's record; the job is queued all the same", zap.String("job_id", id), zap.Error(err))
	}
	return q
}

// written waits for the queued record's write and returns its version; ok is false when it was
// not written (the job had a record, or the store failed).
func (q *queued) written() (v jobs.Version, ok bool) {
	if q.ack == nil {
		return v, false
	}
	select {
	case ack := <-q.ack.Ok():
		return jobs.Created(q.rec, ack), true
	case err := <-q.ack.Err():
		if !jobs.IsConflict(err) {
			q.h.log.Warn("cannot write the queued job's record", zap.String("job_id", q.rec.ID), zap.Error(err))
		}
	case <-q.ctx.Done():
	}
	return v, false
}

// failed records why a job whose publish failed never ran, rather than leave it queued for ever.
func (q *queued) failed(reason string) {
	v, ok := q.written()
	if !ok {
		return
	}
	q.rec.Status, q.rec.Error, q.rec.Finished = jobtype.Failed, reason, time.Now()
	if _, err := q.h.jobs.Move(q.ctx, q.rec, v); err != nil {
		q.h.log.Warn("cannot record that the job was never queued", zap.String("job_id", q.rec.ID), zap.Error(err))
	}
}

// withdraw removes the record again, unless someone has written over it since.
func (q *queued) withdraw() {
	v, ok := q.written()
	if !ok {
		return
	}
	if err := q.h.jobs.Delete(q.ctx, q.rec.ID, v); err != nil && !errors.Is(err, jobs.ErrConflict) {
		q.h.log.Warn("cannot withdraw the queued record of a repeated call", zap.String("job_id", q.rec.ID), zap.Error(err))
	}
}

// answerRepeat answers a call whose Nats-Msg-Id the stream has just seen, so it was not queued
// again: from the job's record when it has ended, else by saying where its outcome will appear.
// A job of another function under that id, or one sent with other arguments, is never answered
// with: the id would otherwise hand anyone who learns it the outcome of someone else's call.
func (h *Host) answerRepeat(ctx context.Context, m *nats.Msg, id, name string) {
	rec, err := h.jobs.Get(ctx, id)
	switch {
	case err == nil && rec.Function != name:
		h.respondError(m, id, name, jobs.TakenID(id, name, rec.Function).Error())
	case err == nil && !rec.SameArgs(m.Data):
		h.respondError(m, id, name, jobs.ReusedID(id, name).Error())
	case err == nil && rec.Status == jobtype.Succeeded && rec.Result != nil:
		h.respond(m, rec.ID, rec.FlowID, rec.Result, string(jobtype.Succeeded))
	case err == nil && rec.Status == jobtype.Succeeded:
		h.respondError(m, id, name, fmt.Sprintf("job %s already succeeded; its result (%d bytes) is too big for the job record and was published on %s", id, rec.ResultBytes, bus.ResultSubject(name)))
	case err == nil && rec.Status == jobtype.Failed:
		h.respond(m, rec.ID, rec.FlowID, errorBody(rec, rec.Error, ""), string(jobtype.Failed))
	default:
		h.respondError(m, id, name, fmt.Sprintf("job %s was already sent with this Nats-Msg-Id and has not finished; its outcome will be on %s (or see `host job %s`)", id, bus.ResultSubject(name), id))
	}
}

func (h *Host) respondError(m *nats.Msg, jobID, name, msg string) {
	h.log.Warn("call refused", zap.String("function", name), zap.String("job_id", jobID), zap.String("reason", msg))
	h.respond(m, jobID, "", errorBody(&jobs.Record{ID: jobID, Function: name}, msg, ""), string(jobtype.Failed))
}

// respond answers a core request on its own inbox, the only place a host replies to.
func (h *Host) respond(m *nats.Msg, jobID, flowID string, body []byte, status string) {
	if m.Reply == "" {
		return
	}
	r := nats.NewMsg(m.Reply)
	r.Data = body
	r.Header.Set(bus.HeaderJobID, jobID)
	if flowID != "" {
		r.Header.Set(bus.HeaderFlowID, flowID)
	}
	r.Header.Set(bus.HeaderJobStatus, status)
	if err := h.nc.PublishMsg(r); err != nil {
		h.log.Warn("cannot answer the caller; it times out waiting", zap.String("job_id", jobID), zap.Error(err))
	}
}

// reportUnknown publishes an error event for a trigger that no host serves, so it does not
// vanish in silence: the trigger stream keeps only what some function will consume.
func (h *Host) reportUnknown(m *nats.Msg, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.AckWait)
	defer cancel()
	if h.servedAnywhere(ctx, name) {
		return
	}
	id := callerID(m.Header)
	flow := readLineage(m.Header, id).flow
	msg := fmt.Sprintf("no function named %q is served; the message to %s was dropped. Add functions/%s.<ext> (see `host check`)", name, m.Subject, name) + h.refusedText(ctx, name)
	ev := nats.NewMsg(bus.ErrorSubject(name))
	ev.Data = errorBody(&jobs.Record{ID: id, Function: name, FlowID: flow}, msg, "")
	ev.Header.Set(bus.HeaderJobID, id)
	ev.Header.Set(bus.HeaderFlowID, flow)
	ev.Header.Set(bus.HeaderMsgID, h.ids.Derive(id, "unknown", name))
	if err := h.publish(ctx, ev); err != nil {
		h.log.Warn("cannot publish the unknown-function error", zap.String("function", name), zap.Error(err))
	}
	h.log.Warn("message for a function nobody serves", zap.String("function", name), zap.String("subject", m.Subject))
}
