// Package client is what the host's CLI commands do against a running host's NATS: queue a
// job, wait for it, read its records and its logs. Anything here can be done with a stock NATS
// client too; this package only makes it one call.
package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/retry"
	"github.com/agenthost/host/internal/trace"
)

// Client talks to the NATS that hosts serve on.
type Client struct {
	NC   *nats.Conn
	JS   jetstream.JetStream
	Jobs *jobs.Store
	// Warn hears what went wrong without failing the call (a start no host could sign); nil
	// drops it.
	Warn func(error)
}

// New wraps an open connection.
func New(ctx context.Context, nc *nats.Conn) (*Client, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("open JetStream: %w", err)
	}
	store, err := jobs.Bind(ctx, js)
	if err != nil {
		return nil, err
	}
	return &Client{NC: nc, JS: js, Jobs: store}, nil
}

// Lazy opens a Client on first use and keeps it: a web face is built before the host it fronts
// has made the job bucket, so its client can be opened only on the first request. The zero
// value needs NC set.
type Lazy struct {
	NC *nats.Conn

	mu sync.Mutex
	c  *Client
}

// Get returns the client, opening it if this is the first call that succeeds.
func (l *Lazy) Get(ctx context.Context) (*Client, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.c != nil {
		return l.c, nil
	}
	c, err := New(ctx, l.NC)
	if err != nil {
		return nil, fmt.Errorf("open the job records: %w", err)
	}
	l.c = c
	return c, nil
}

// ErrNotServed is returned when no host serves the function.
var ErrNotServed = errors.New("no host serves this function")

// ErrIDTaken is returned when a chosen job id already names another function's job.
var ErrIDTaken = jobs.ErrIDTaken

// Invoke queues a run of function with payload under job id and returns once JetStream has
// stored it. The job's queued record is written first, so `host job <id>` knows it at once.
// An id that already names a job is taken as an idempotency key: the same call again is queued
// (and deduplicated, or answered from its record, by the hosts), while another function's id
// is refused with ErrIDTaken and other arguments with jobs.ErrIDReused.
func (c *Client) Invoke(ctx context.Context, function, id string, payload []byte) error {
	return c.InvokeAs(ctx, function, id, payload, Start{})
}

// InvokeAs is Invoke for a job st says who starts (its record's started_by and starter; see
// Stamp). A start a host could not be asked to sign is queued all the same, as a claim.
func (c *Client) InvokeAs(ctx context.Context, function, id string, payload []byte, st Start) error {
	if err := CheckPayload(c.NC, function, payload); err != nil {
		return err
	}
	stream, err := c.JS.Stream(ctx, bus.RunStream)
	if err != nil {
		return fmt.Errorf("find the trigger stream %s: %w (is a host running?)", bus.RunStream, err)
	}
	cons, err := stream.Consumer(ctx, bus.ConsumerName(function))
	if err != nil {
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("function %q: %w; check the name, or `host check` the functions directory", function, ErrNotServed)
		}
		return fmt.Errorf("look up function %q: %w", function, err)
	}
	// The function's queue: limit, against its consumer as the lookup just read it.
	if err := bus.CheckQueue(function, cons.CachedInfo()); err != nil {
		return err
	}
	queued, created, err := c.queue(ctx, function, id, payload)
	if err != nil {
		return err
	}
	m := nats.NewMsg(bus.RunSubject(function))
	m.Data = payload
	m.Header.Set(bus.HeaderMsgID, id)
	m.Header.Set(bus.HeaderQueued, "1")
	trace.Inject(ctx, m.Header) // the trace the caller continues (POST /run's traceparent), if any
	if err := Stamp(ctx, c.NC, m, st); err != nil && c.Warn != nil {
		c.Warn(err)
	}
	ack, err := c.JS.PublishMsg(ctx, m)
	if reason, refused := bus.StoreRefused(err); refused {
		// The stream said no: nothing is queued, so the record written for this call goes too,
		// or it would stay queued for a job no host will ever take.
		if created {
			if derr := c.Jobs.Delete(ctx, id, queued); derr != nil && !errors.Is(derr, jobs.ErrConflict) {
				return fmt.Errorf("queue job for %s: JetStream refused it (%s): %w; withdrawing the record written for it failed: %v", function, reason, err, derr)
			}
		}
		advice := bus.StoreRefusalAdvice
		if bus.QueueFull(err) {
			advice = "the trigger stream's cap per subject (serve --queue-per-subject) is reached; send it again once the function's jobs have run"
		}
		return fmt.Errorf("queue job for %s: JetStream refused it, nothing was queued (%s; %s): %w", function, reason, advice, err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("queue job for %s: JetStream did not answer in time; a NATS server whose disk is full stops answering writes (the host's /healthz says whether its store refuses writes); send it again with the same id (--id %s), which cannot queue it twice: %w", function, id, err)
	}
	if err != nil {
		return fmt.Errorf("queue job for %s: %w", function, err)
	}
	if ack.Duplicate && created {
		// The stream holds a trigger under this id that no record was written for (a plain
		// publish no host has taken yet): its arguments cannot be compared with these, and
		// waiting on the id would hand this caller that trigger's outcome.
		if err := c.Jobs.Delete(ctx, id, queued); err != nil && !errors.Is(err, jobs.ErrConflict) {
			return fmt.Errorf("job id %q is taken by a trigger queued before it; withdrawing the record written for this call failed: %w", id, err)
		}
		return fmt.Errorf("job id %q of function %q is taken by a trigger queued under it before this call, whose arguments cannot be compared: %w; send this call under another id", id, function, jobs.ErrIDReused)
	}
	return nil
}

// LogLine is one line of a job's output.
type LogLine struct {
	Stream string // stdout or stderr
	Text   string
	Seq    uint64 // its sequence in the log stream
}

func logLine(m jetstream.Msg) LogLine {
	l := LogLine{Stream: m.Headers().Get(bus.HeaderStream), Text: string(m.Data())}
	if meta, err := m.Metadata(); err == nil {
		l.Seq = meta.Sequence.Stream
	}
	return l
}

// FollowLogs calls fn for each log line of a job as it is published, from the first one, until
// ctx ends. It returns a stop function.
func (c *Client) FollowLogs(ctx context.Context, function, id string, fn func(LogLine)) (stop func(), err error) {
	if err := checkJobID(id); err != nil {
		return nil, err
	}
	cons, err := c.JS.OrderedConsumer(ctx, bus.LogStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{logFilter(function, id)}})
	if err != nil {
		return nil, fmt.Errorf("read logs of job %s: %w", id, err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		fn(logLine(m))
	})
	if err != nil {
		return nil, fmt.Errorf("read logs of job %s: %w", id, err)
	}
	return cc.Stop, nil
}

// Logs returns the log lines a job has published so far.
func (c *Client) Logs(ctx context.Context, id string) ([]LogLine, error) {
	if err := checkJobID(id); err != nil {
		return nil, err
	}
	cons, err := c.JS.OrderedConsumer(ctx, bus.LogStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{logFilter("", id)}})
	if err != nil {
		return nil, fmt.Errorf("read logs of job %s: %w", id, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("read logs of job %s: %w", id, err)
	}
	var out []LogLine
	for left := info.NumPending; left > 0; {
		// 1024 lines a round trip: a capped 10 MiB log is ~100 round trips, and a batch of
		// the longest lines (16 KiB) stays well under the subscription's 64 MiB pending limit.
		batch, err := cons.Fetch(int(min(left, 1024)))
		if err != nil {
			return nil, fmt.Errorf("read logs of job %s: %w", id, err)
		}
		got := 0
		for m := range batch.Messages() {
			out = append(out, logLine(m))
			got++
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("read logs of job %s: %w", id, err)
		}
		if got == 0 {
			break // the rest aged out of the stream while we read
		}
		left -= uint64(got)
	}
	return out, nil
}

// ValidJobID reports whether id can be a job id at all, to fail fast on a typo.
func ValidJobID(id string) bool {
	return id != "" && !strings.ContainsAny(id, ".*> \t")
}

// checkJobID refuses an id that could not be a job's before it becomes part of a subject: "*"
// or ">" there would read every job's log instead of one.
func checkJobID(id string) error {
	if !ValidJobID(id) {
		return fmt.Errorf("%q is not a job id (no dots, wildcards or spaces): %w", id, ErrUnknownJob)
	}
	return nil
}

// WaitServed waits, until ctx ends, for some host to serve function: for its trigger consumer,
// the one Invoke looks up. It is for a function the caller just wrote to a directory a host
// serves, which the host loads within a second or so of the last write.
func (c *Client) WaitServed(ctx context.Context, function string) error {
	stream, err := c.JS.Stream(ctx, bus.RunStream)
	if err != nil {
		return fmt.Errorf("find the trigger stream %s: %w (is a host running?)", bus.RunStream, err)
	}
	_, err = retry.Do(ctx, retry.Load, func() (jetstream.Consumer, error) {
		cons, err := stream.Consumer(ctx, bus.ConsumerName(function))
		if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, retry.Permanent(fmt.Errorf("look up function %q: %w", function, err))
		}
		return cons, err
	})
	if errors.Is(err, jetstream.ErrConsumerNotFound) || ctx.Err() != nil {
		return fmt.Errorf("function %q: %w yet", function, ErrNotServed)
	}
	return err
}
