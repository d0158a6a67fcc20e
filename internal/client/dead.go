package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/jobs"
)

// ErrNoDeadLetter: no dead letter is kept for the job (never dead, removed, or expired).
var ErrNoDeadLetter = errors.New("no dead letter")

// DeadLetters lists the dead letters, oldest first; function "" lists all.
func (c *Client) DeadLetters(ctx context.Context, function string) ([]jobs.DeadLetter, error) {
	filter := bus.DeadPrefix + "*.*"
	if function != "" {
		filter = bus.DeadPrefix + function + ".*"
	}
	dl, err := c.readDead(ctx, filter)
	if err != nil {
		return nil, err
	}
	c.addReplays(ctx, dl)
	return dl, nil
}

// addReplays says, for each dead letter, which jobs replayed it. The dead letter stream keeps
// letters as the host wrote them, so the replays are noted in the dead job's record instead.
func (c *Client) addReplays(ctx context.Context, dl []jobs.DeadLetter) {
	if c.Jobs == nil {
		return
	}
	for i := range dl {
		if rec, err := c.Jobs.Get(ctx, dl[i].JobID); err == nil {
			dl[i].ReplayedAs = rec.ReplayedAs
		}
	}
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
		return nil, fmt.Errorf("%w for job %s (list them with `host dead ls`)", ErrNoDeadLetter, jobID)
	}
	c.addReplays(ctx, dl[len(dl)-1:])
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
			var seq uint64
			if meta, err := m.Metadata(); err == nil {
				kept = meta.Timestamp
				seq = meta.Sequence.Stream
			}
			d := jobs.ReadDeadLetter(nats.Header(m.Headers()), m.Data(), kept)
			d.Seq = seq
			out = append(out, d)
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
// the job it replays (the new job's record shows it as replayed_from), and notes newID in the
// dead job's record (replayed_as, which `host dead ls` shows). Its flow goes on under the same
// flow id.
func (c *Client) Replay(ctx context.Context, jobID, newID string) error {
	return c.ReplayAs(ctx, jobID, newID, Start{})
}

// ReplayAs is Replay by whoever st names: the new job's started_by is "replay of job <id> by
// <st.By>", and its starter is the dead job's own (a replay goes on with the flow it was a
// step of, whose starter still may not decide its approvals), when st can be signed.
func (c *Client) ReplayAs(ctx context.Context, jobID, newID string, st Start) error {
	d, err := c.DeadLetter(ctx, jobID)
	if err != nil {
		return err
	}
	// A job that ran on a result or error event is replayed to the functions listening there,
	// on the subject the trigger stream captures for them (bus.TriggerIn), not as a result.
	m := nats.NewMsg(bus.TriggerIn(d.Subject))
	m.Data = d.Data
	// Approval-Sig: a decided gate's note to this step is replayed with the decision really made.
	for _, k := range []string{bus.HeaderFlowID, bus.HeaderParentJob, bus.HeaderHop, bus.HeaderApprovalSig, "Content-Type", "X-GitHub-Event"} {
		if v := d.Header.Get(k); v != "" {
			m.Header.Set(k, v)
		}
	}
	m.Header.Set(bus.HeaderMsgID, newID)
	m.Header.Set(bus.HeaderReplayOf, jobID)
	if st.By != "" {
		st.By, st.Starter = "replay of job "+jobID+" by "+st.By, ""
		if c.Jobs != nil {
			if rec, err := c.Jobs.Get(ctx, jobID); err == nil {
				st.Starter = rec.Starter
			}
		}
		if err := Stamp(ctx, c.NC, m, st); err != nil && c.Warn != nil {
			c.Warn(err)
		}
	}
	if _, err := c.JS.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("replay job %s on %s: %w", jobID, d.Subject, err)
	}
	if c.Jobs == nil {
		return nil
	}
	err = c.noteReplay(ctx, jobID, newID)
	if errors.Is(err, jobs.ErrNotFound) {
		return nil // the record outlived its bucket's TTL; the dead letter (30 days) did not
	}
	if err != nil {
		return fmt.Errorf("job %s was replayed as %s, but its record could not note it (`host dead ls` will not show the replay): %w", jobID, newID, err)
	}
	return nil
}

// noteReplay adds newID to the replays job jobID's record lists, over the version it read, so
// that two replays at once both stay noted.
func (c *Client) noteReplay(ctx context.Context, jobID, newID string) error {
	for range cancelTries {
		rec, at, err := c.Jobs.GetRev(ctx, jobID)
		if err != nil {
			return err
		}
		rec.ReplayedAs = append(rec.ReplayedAs, newID)
		if _, err = c.Jobs.Amend(ctx, rec, at); !errors.Is(err, jobs.ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("the record kept changing under the replay; try `host dead replay` again")
}

// RemoveDeadLetter deletes the dead letter of one job (every one, if it failed for good more
// than once) and returns how many it removed.
func (c *Client) RemoveDeadLetter(ctx context.Context, jobID string) (int, error) {
	if !ValidJobID(jobID) {
		return 0, fmt.Errorf("%q is not a job id", jobID)
	}
	dl, err := c.readDead(ctx, bus.DeadPrefix+"*."+jobID)
	if err != nil {
		return 0, err
	}
	if len(dl) == 0 {
		return 0, fmt.Errorf("%w for job %s (list them with `host dead ls`)", ErrNoDeadLetter, jobID)
	}
	stream, err := c.JS.Stream(ctx, bus.DeadStream)
	if err != nil {
		return 0, fmt.Errorf("remove dead letter of job %s: %w", jobID, err)
	}
	for _, d := range dl {
		if err := stream.DeleteMsg(ctx, d.Seq); err != nil {
			return 0, fmt.Errorf("remove dead letter of job %s (sequence %d): %w", jobID, d.Seq, err)
		}
	}
	return len(dl), nil
}

// PurgeDeadLetters deletes every dead letter of function and returns how many there were.
// The count comes from the server's own answer to the purge: counting first and purging
// after could miss a letter added in between.
func (c *Client) PurgeDeadLetters(ctx context.Context, function string) (uint64, error) {
	if err := functions.CheckName(function); err != nil {
		return 0, fmt.Errorf("purge dead letters: %q is not a function name: %w", function, err)
	}
	req, err := json.Marshal(map[string]string{"filter": bus.DeadPrefix + function + ".*"})
	if err != nil {
		return 0, err
	}
	msg, err := c.NC.RequestWithContext(ctx, "$JS.API.STREAM.PURGE."+bus.DeadStream, req)
	if err != nil {
		return 0, fmt.Errorf("purge dead letters of %s: %w", function, err)
	}
	var resp struct {
		Success bool   `json:"success"`
		Purged  uint64 `json:"purged"`
		Error   *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return 0, fmt.Errorf("purge dead letters of %s: bad answer %q: %w", function, msg.Data, err)
	}
	if resp.Error != nil || !resp.Success {
		desc := "no success"
		if resp.Error != nil {
			desc = resp.Error.Description
		}
		return 0, fmt.Errorf("purge dead letters of %s: %s", function, desc)
	}
	return resp.Purged, nil
}
