package client

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
)

// FollowJob calls fn for each log line of job id, from its first, as the lines are published,
// and returns the job's final record once fn has had every line up to the last one the record
// names (jobs.Record.LogLastSeq). The end is exact: no line of the job is printed after its
// result, and no time is spent waiting for lines that may never come. function may be "" when
// it is not known.
func (c *Client) FollowJob(ctx context.Context, function, id string, fn func(LogLine)) (*jobs.Record, error) {
	var seen atomic.Uint64
	more := make(chan struct{}, 1)
	stop, err := c.FollowLogs(ctx, function, id, func(l LogLine) {
		fn(l)
		seen.Store(l.Seq)
		select {
		case more <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, err
	}
	defer stop()
	rec, err := c.Jobs.WaitFinal(ctx, id)
	if err != nil {
		return nil, err
	}
	last := rec.LogLastSeq
	if last == 0 || seen.Load() >= last {
		return rec, nil
	}
	// A line the stream no longer has (its age or size limit dropped it) is never delivered:
	// waiting for it would wait for ever. Wait instead for the job's last line still stored,
	// which the subscription may not have delivered yet either. A line past the stream's last
	// sequence is not gone but still on its way.
	if s, err := c.JS.Stream(ctx, bus.LogStream); err == nil && s.CachedInfo().State.LastSeq >= last {
		if _, err := s.GetMsg(ctx, last); errors.Is(err, jetstream.ErrMsgNotFound) {
			m, err := s.GetLastMsgForSubject(ctx, logFilter(function, id))
			if err != nil || m.Sequence > last {
				return rec, nil // none of its lines is left (or the stream cannot say which)
			}
			last = m.Sequence
		}
	}
	for seen.Load() < last {
		select {
		case <-ctx.Done():
			return rec, fmt.Errorf("read the log of job %s up to its last line (sequence %d in %s): %w", id, last, bus.LogStream, ctx.Err())
		case <-more:
		}
	}
	return rec, nil
}

// JobState is what is known of a job id, for a command that must tell an unknown id from a job
// that has not started.
type JobState int

const (
	// JobUnknown: no record, no log line, no queued trigger under this id.
	JobUnknown JobState = iota
	// JobQueued: the job has not started: its record says queued, or it has no record and no
	// log line yet but a trigger with this id waits in the trigger stream.
	JobQueued
	// JobSeen: the job has a record or log lines.
	JobSeen
)

// LookupJob says whether id names a job: one with a record or log lines, or a trigger still
// waiting in the trigger stream under that id (as `invoke` queues it).
func (c *Client) LookupJob(ctx context.Context, id string) (JobState, error) {
	if !ValidJobID(id) {
		return JobUnknown, nil
	}
	if rec, err := c.Jobs.Get(ctx, id); err == nil {
		if rec.Status == jobtype.Queued {
			return JobQueued, nil
		}
		return JobSeen, nil
	} else if !errors.Is(err, jobs.ErrNotFound) {
		return JobUnknown, err
	}
	logs, err := c.JS.Stream(ctx, bus.LogStream)
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return JobUnknown, fmt.Errorf("look up the log stream %s: %w", bus.LogStream, err)
	}
	if err == nil {
		info, err := logs.Info(ctx, jetstream.WithSubjectFilter(logFilter("", id)))
		if err != nil {
			return JobUnknown, fmt.Errorf("look up the log of job %s: %w", id, err)
		}
		if len(info.State.Subjects) > 0 {
			return JobSeen, nil
		}
	}
	queued, err := c.queued(ctx, id)
	if err != nil || !queued {
		return JobUnknown, err
	}
	return JobQueued, nil
}

// queued reports whether a trigger with message id id waits in the trigger stream. The stream
// keeps only triggers not yet settled (interest retention), so this reads the queue, headers
// only, and no more.
func (c *Client) queued(ctx context.Context, id string) (bool, error) {
	seq, err := c.triggerSeq(ctx, id)
	return seq > 0, err
}

// Trigger returns the body of job id's trigger while the trigger stream still holds it (the
// job is queued, running or waiting for a retry), or ErrUnknownJob once the job has settled.
func (c *Client) Trigger(ctx context.Context, id string) ([]byte, error) {
	if err := checkJobID(id); err != nil {
		return nil, err
	}
	seq, err := c.triggerSeq(ctx, id)
	if err != nil {
		return nil, err
	}
	if seq == 0 {
		return nil, fmt.Errorf("job %s: no trigger waits in %s: %w", id, bus.RunStream, ErrUnknownJob)
	}
	s, err := c.JS.Stream(ctx, bus.RunStream)
	if err != nil {
		return nil, fmt.Errorf("look up the trigger stream %s: %w", bus.RunStream, err)
	}
	m, err := s.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("job %s: its trigger settled meanwhile: %w", id, ErrUnknownJob)
	}
	if err != nil {
		return nil, fmt.Errorf("read the trigger of job %s: %w", id, err)
	}
	return m.Data, nil
}

// triggerSeq returns the stream sequence of the trigger with message id id, 0 when the stream
// holds none.
func (c *Client) triggerSeq(ctx context.Context, id string) (uint64, error) {
	s, err := c.JS.Stream(ctx, bus.RunStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("look up the trigger stream %s: %w", bus.RunStream, err)
	}
	if s.CachedInfo().State.Msgs == 0 {
		return 0, nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{HeadersOnly: true})
	if err != nil {
		return 0, fmt.Errorf("read the trigger stream %s: %w", bus.RunStream, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the trigger stream %s: %w", bus.RunStream, err)
	}
	for left := info.NumPending; left > 0; {
		batch, err := cons.Fetch(int(min(left, 512)))
		if err != nil {
			return 0, fmt.Errorf("read the trigger stream %s: %w", bus.RunStream, err)
		}
		got := 0
		var found uint64
		for m := range batch.Messages() {
			got++
			if found == 0 && m.Headers().Get(bus.HeaderMsgID) == id {
				if meta, err := m.Metadata(); err == nil {
					found = meta.Sequence.Stream
				}
			}
		}
		if found > 0 {
			return found, nil
		}
		if err := batch.Error(); err != nil {
			return 0, fmt.Errorf("read the trigger stream %s: %w", bus.RunStream, err)
		}
		if got == 0 {
			break
		}
		left -= uint64(got)
	}
	return 0, nil
}

// ResultWatch hears the result of one job on agent.result.<function>.
type ResultWatch struct {
	sub    *nats.Subscription
	result chan []byte
}

// WatchResult listens for job id's result on agent.result.<function>. Call it before the job is
// queued: a result too big for the job record (jobs.MaxResultBytes) is only ever published
// there, and a core subscription hears only what is published after it.
func (c *Client) WatchResult(function, id string) (*ResultWatch, error) {
	w := &ResultWatch{result: make(chan []byte, 1)}
	var err error
	w.sub, err = c.NC.Subscribe(bus.ResultSubject(function), func(m *nats.Msg) {
		if m.Header.Get(bus.HeaderJobID) != id {
			return
		}
		select {
		case w.result <- m.Data:
		default: // a rerun's result; the first is the one
		}
	})
	if err != nil {
		return nil, fmt.Errorf("listen for the result on %s: %w", bus.ResultSubject(function), err)
	}
	// The subscription must be in place at the server before the job can end.
	if err := c.NC.Flush(); err != nil {
		w.sub.Unsubscribe()
		return nil, fmt.Errorf("listen for the result on %s: %w", bus.ResultSubject(function), err)
	}
	return w, nil
}

// Result waits for the result. The host publishes it before it writes the final record, so
// once the record says the job succeeded it has been sent to this subscription.
func (w *ResultWatch) Result(ctx context.Context) ([]byte, error) {
	select {
	case r := <-w.result:
		return r, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for the result on %s: %w", w.sub.Subject, ctx.Err())
	}
}

// Stop stops listening.
func (w *ResultWatch) Stop() { _ = w.sub.Unsubscribe() }

// logFilter is the log subject of a job, of any function when function is "".
func logFilter(function, id string) string {
	if function == "" {
		return bus.LogsPrefix + "*." + id
	}
	return bus.LogsSubject(function, id)
}
