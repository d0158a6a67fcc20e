package client

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
)

// DeadLetters lists the dead letters, oldest first; function "" lists all.
func (c *Client) DeadLetters(ctx context.Context, function string) ([]jobs.DeadLetter, error) {
	filter := bus.DeadPrefix + "*.*"
	if function != "" {
		filter = bus.DeadPrefix + function + ".*"
	}
	return c.readDead(ctx, filter)
}

// DeadLetter finds the dead letter of one job.
func (c *Client) DeadLetter(ctx context.Context, jobID string) (*jobs.DeadLetter, error) {
	if !ValidJobID(jobID) {
		return nil, fmt.Errorf("%q is not a job id", jobID)
	}
	dl, err := c.readDead(ctx, bus.DeadPrefix+"*."+jobID)
	if err != nil {
		return nil, err
	}
	if len(dl) == 0 {
		return nil, fmt.Errorf("no dead letter for job %s (list them with `host dead ls`)", jobID)
	}
	return &dl[len(dl)-1], nil
}

func (c *Client) readDead(ctx context.Context, filter string) ([]jobs.DeadLetter, error) {
	cons, err := c.JS.OrderedConsumer(ctx, bus.DeadStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		return nil, fmt.Errorf("read dead letters: %w", err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("read dead letters: %w", err)
	}
	var out []jobs.DeadLetter
	for left := info.NumPending; left > 0; {
		batch, err := cons.Fetch(int(min(left, 256)))
		if err != nil {
			return nil, fmt.Errorf("read dead letters: %w", err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			var kept time.Time
			if meta, err := m.Metadata(); err == nil {
				kept = meta.Timestamp
			}
			out = append(out, jobs.ReadDeadLetter(nats.Header(m.Headers()), m.Data(), kept))
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("read dead letters: %w", err)
		}
		if got == 0 {
			break
		}
		left -= uint64(got)
	}
	return out, nil
}

// Replay publishes a dead letter's original message again, under newID, with a header naming
// the job it replays. Its flow goes on under the same flow id.
func (c *Client) Replay(ctx context.Context, jobID, newID string) error {
	d, err := c.DeadLetter(ctx, jobID)
	if err != nil {
		return err
	}
	m := nats.NewMsg(d.Subject)
	m.Data = d.Data
	for _, k := range []string{bus.HeaderFlowID, bus.HeaderParentJob, bus.HeaderHop, "Content-Type", "X-GitHub-Event"} {
		if v := d.Header.Get(k); v != "" {
			m.Header.Set(k, v)
		}
	}
	m.Header.Set(bus.HeaderMsgID, newID)
	m.Header.Set(bus.HeaderReplayOf, jobID)
	if _, err := c.JS.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("replay job %s on %s: %w", jobID, d.Subject, err)
	}
	return nil
}
