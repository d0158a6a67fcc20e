package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/join"
	"github.com/agenthost/host/internal/route"
	"github.com/agenthost/host/internal/trace"
)

// Joins. A function with `join: a b` does not run on each message from a or b: each is
// gathered (package join) under the flow it belongs to, and acked; the message that completes
// the gathering starts the joined step once, on its own trigger, whose id the hosts derive
// from the join and the flow (so it runs once however many hosts gather, and a caller cannot
// start it). The first message of a flow also arms the join's timeout: a trigger of its own
// that waits in the stream until the deadline, and then fails the join if it is not done. An
// awaited step that fails for good fails a join that has begun gathering in its flow at once:
// its error event is one of the join's triggers.

// joinWait is how long a gather that could not reach the join store waits before its message
// is delivered again.
const joinWait = time.Second

// gather decides a delivery to a joining function: gathered into its join, or (ok false) run
// as a job: the joined step itself, or a trigger from anything but an awaited step.
func (h *Host) gather(j *job) (end, bool) {
	fn := j.s.fn
	hdr := j.msg.Headers()
	id, flow := hdr.Get(bus.HeaderMsgID), j.rec.FlowID
	switch {
	case id == h.joinID(fn.Name, flow):
		j.joinFailed = hdr.Get(bus.HeaderJoinFailed)
		return end{}, false
	case id == h.ids.Derive("join-timeout", fn.Name, flow):
		j.isJoinTimeout = true
		return h.joinTimeout(j), true
	case strings.HasPrefix(j.msg.Subject(), bus.ErrorPrefix):
		failed := strings.TrimPrefix(j.msg.Subject(), bus.ErrorPrefix)
		if !slices.Contains(fn.Spec.Join, failed) || hdr.Get(bus.HeaderFlowID) == "" {
			return end{}, false
		}
		// Only a host's error event fails a join: its message id is derived from the failed
		// job with the hosts' key, which no caller publishing on agent.error.<fn> has.
		if id != h.ids.Derive(hdr.Get(bus.HeaderJobID), "error") {
			h.log.Warn("an error event no host published was not taken to fail a join", zap.String("function", fn.Name),
				zap.String("subject", j.msg.Subject()), zap.String("flow_id", flow))
			return end{verdict: gathered}, true
		}
		// Only a join that has begun gathering in this flow: an awaited step fails in flows that
		// never reach the join too (called on its own), and those are not the join's to fail.
		ctx, cancel := context.WithTimeout(context.Background(), h.cfg.AckWait)
		defer cancel()
		if _, begun, err := h.joins.Get(ctx, fn.Name, flow); err != nil {
			return h.joinRetry(j, err), true
		} else if !begun {
			return end{verdict: gathered}, true
		}
		var ev jobs.ErrorEvent
		_ = json.Unmarshal(j.msg.Data(), &ev)
		return h.failJoin(j, fmt.Sprintf("%s failed for good (job %s): %s", failed, ev.JobID, ev.Error)), true
	}
	from := hdr.Get(bus.HeaderFunction)
	if !slices.Contains(fn.Spec.Join, from) {
		return end{}, false
	}
	p := join.Part{Function: from, Data: j.msg.Data()}
	if n, err := strconv.Atoi(hdr.Get(bus.HeaderItems)); err == nil && n > 0 && n <= route.MaxItems {
		if i, err := strconv.Atoi(hdr.Get(bus.HeaderItem)); err == nil && i >= 0 && i < n {
			p.Index, p.Count = i, n
		}
	}
	if !h.publishedByHost(hdr, j.msg.Subject()) {
		// Job-Function and the item headers are whatever a publisher wrote: a caller of the
		// joining function gets an ordinary job, never a part of someone's join.
		return end{}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.AckWait)
	defer cancel()
	g, err := h.joins.Add(ctx, fn.Name, flow, fn.Spec.Join, j.rec.Enqueued.Add(joinTimeout(fn.Spec)), p)
	if err != nil {
		return h.joinRetry(j, err), true
	}
	st := g.State
	if st.Armed == 0 && !st.Done && st.Failed == "" {
		if err := h.armJoin(ctx, j, st.Deadline); err != nil {
			return h.joinRetry(j, err), true
		}
	}
	if st.Done || (g.Completed && st.Failed != "") {
		// Again on a redelivery after completing it: the joined step's trigger deduplicates,
		// and a joined step that already ran is answered from its record.
		if err := h.startJoin(ctx, j, st, st.Failed); err != nil {
			return h.joinRetry(j, err), true
		}
	}
	return end{verdict: gathered}, true
}

// publishedByHost reports whether a message on subject is the output of a host's job, as
// publishRoutes sends it: its message id is derived from the job named in Job-Id (and, for an
// item of a map, its index) with the hosts' key.
func (h *Host) publishedByHost(hdr nats.Header, subject string) bool {
	job, id := hdr.Get(bus.HeaderJobID), hdr.Get(bus.HeaderMsgID)
	if job == "" || id == "" {
		return false
	}
	if id == h.ids.Next(job, subject) {
		return true
	}
	i, err := strconv.Atoi(hdr.Get(bus.HeaderItem))
	return err == nil && id == h.ids.Item(job, subject, i)
}

func joinTimeout(s *annot.Spec) time.Duration {
	if s.JoinTimeout > 0 {
		return s.JoinTimeout
	}
	return annot.DefaultJoinTimeout
}

func (h *Host) joinID(function, flow string) string { return h.ids.Derive("join", function, flow) }

// armJoin publishes the join's timeout trigger and notes in its state where it is. The trigger
// waits in the stream until the deadline; the join's end removes it, so that a done join does
// not keep one of its function's pending messages for the rest of the hour.
func (h *Host) armJoin(ctx context.Context, j *job, deadline time.Time) error {
	fn := j.s.fn
	m := h.outMsg(bus.RunSubject(fn.Name), []byte("{}"), j.rec)
	m.Header.Set(bus.HeaderMsgID, h.ids.Derive("join-timeout", fn.Name, j.rec.FlowID))
	m.Header.Set(bus.HeaderHop, strconv.Itoa(j.rec.Hop))
	h.vouchCarry(m, j.rec)
	ack, err := h.js.PublishMsg(ctx, m)
	if err != nil {
		return fmt.Errorf("arm the join's timeout: %w", err)
	}
	return h.joins.Arm(ctx, fn.Name, j.rec.FlowID, ack.Sequence)
}

// disarm removes a timer (a join's or an approval's timeout trigger, at seq in the trigger
// stream) that is no longer needed, so that it does not hold one of its function's pending
// messages until its deadline; one that stays is dropped when it comes up.
func (h *Host) disarm(ctx context.Context, fn string, seq uint64) {
	if seq == 0 {
		return
	}
	h.mu.Lock()
	stream := h.stream
	h.mu.Unlock()
	if err := stream.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		h.log.Warn("cannot remove a timer that is no longer needed; it is dropped when its deadline comes", zap.String("function", fn), zap.Error(err))
	}
}

// joinTimeout decides a delivery of a join's timeout trigger: back to the stream until the
// deadline, then the join fails unless it is done.
func (h *Host) joinTimeout(j *job) end {
	fn := j.s.fn
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.AckWait)
	defer cancel()
	st, ok, err := h.joins.Get(ctx, fn.Name, j.rec.FlowID)
	switch {
	case err != nil:
		return h.joinRetry(j, err)
	case !ok || st.Done || st.Failed != "":
		return end{verdict: gathered}
	case time.Now().Before(st.Deadline):
		return end{verdict: waiting, due: st.Deadline}
	}
	return h.failJoin(j, fmt.Sprintf("its join-timeout (%s) passed; never came: %s", joinTimeout(fn.Spec), st.Missing()))
}

// failJoin fails the join of j's flow for why, unless it is over, and starts the joined step
// so that it fails with it.
func (h *Host) failJoin(j *job, why string) end {
	fn := j.s.fn
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.AckWait)
	defer cancel()
	g, err := h.joins.Fail(ctx, fn.Name, j.rec.FlowID, fn.Spec.Join, j.rec.Enqueued.Add(joinTimeout(fn.Spec)), why)
	if err != nil {
		return h.joinRetry(j, err)
	}
	if g.Completed {
		if err := h.startJoin(ctx, j, g.State, why); err != nil {
			return h.joinRetry(j, err)
		}
	}
	return end{verdict: gathered}
}

// startJoin publishes the joined step's trigger: what was gathered, or, when the join failed,
// an empty one saying why.
func (h *Host) startJoin(ctx context.Context, j *job, st join.State, failed string) error {
	fn := j.s.fn
	payload := []byte("{}")
	if failed == "" {
		var err error
		if payload, err = h.joins.Payload(ctx, fn.Name, j.rec.FlowID, st); err != nil {
			return err
		}
		if room := int(h.nc.MaxPayload()) - 8<<10; len(payload) > room {
			failed = fmt.Sprintf("what it gathered is %d bytes, more than a NATS message can carry (%d); have the awaited steps return references (a volume's path) rather than the data", len(payload), room)
			payload = []byte("{}")
		}
	}
	m := nats.NewMsg(bus.RunSubject(fn.Name))
	m.Data = payload
	m.Header.Set(bus.HeaderMsgID, h.joinID(fn.Name, j.rec.FlowID))
	m.Header.Set(bus.HeaderFlowID, j.rec.FlowID)
	m.Header.Set(bus.HeaderHop, strconv.Itoa(j.rec.Hop))
	setDeployment(m.Header, j.rec)
	if failed != "" {
		m.Header.Set(bus.HeaderJoinFailed, oneLine(failed, 1000))
	}
	// The joined step hangs under the step whose message completed the join.
	trace.Carry(m.Header, j.msg.Headers())
	h.vouchCarry(m, j.rec)
	if err := h.publish(ctx, m); err != nil {
		return fmt.Errorf("start the joined step: %w", err)
	}
	if !j.isJoinTimeout {
		h.disarm(ctx, fn.Name, st.Armed) // the timeout trigger being settled is not removed under itself
	}
	h.log.Info("join complete; its step is started", zap.String("function", fn.Name), zap.String("flow_id", j.rec.FlowID), zap.String("failed", failed))
	return nil
}

// joinRetry hands a gathering delivery back for a little while: the join store (or NATS) did
// not answer, and what it carries must not be lost.
func (h *Host) joinRetry(j *job, err error) end {
	h.log.Warn("cannot gather into the join; its message is delivered again shortly", zap.String("function", j.s.fn.Name),
		zap.String("flow_id", j.rec.FlowID), zap.Error(err))
	return end{verdict: waiting, due: time.Now().Add(joinWait), err: err}
}

func oneLine(s string, n int) string {
	return truncate(strings.Join(strings.Fields(s), " "), n)
}
