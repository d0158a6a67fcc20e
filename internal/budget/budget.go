// Package budget counts the jobs each flow starts, so that one message cannot start an
// unbounded number of them (a map of maps multiplies): `serve --flow-max-jobs`.
//
// The count is shared by every host, in a JetStream KeyValue bucket: one entry per flow, the
// jobs its steps have started through next: edges. A step reserves all its next steps at once,
// before it publishes any, by one write checked against the revision it read (so two hosts
// adding at once cannot both take the last room), under a message id derived from the step's
// job, so that a step run again (its host died before its outputs were out) is counted once
// within the bucket's duplicate window (Window).
package budget

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/bus"
)

// Bucket is the KeyValue bucket of the flows' counts, keyed by flow id.
const Bucket = "agent_flow_jobs"

// Window is how long the bucket remembers a reservation's message id: a step run again
// within it is not counted again. The trigger stream's own duplicate window, for the same
// reason: a rerun of a step within it cannot start its next steps twice either.
const Window = 20 * time.Minute

// casTries bounds one reservation's attempts while other hosts write the same flow's count.
const casTries = 50

// Store is the bucket.
type Store struct {
	js jetstream.JetStream
	kv jetstream.KeyValue
}

// Open creates or updates the bucket. Its entries live as long as the job records (ttl): a
// flow is counted for as long as its jobs can be looked up.
//
// The bucket's stream is made here rather than by CreateOrUpdateKeyValue, which fixes a
// bucket's duplicate window at 2 minutes: shorter than a step held by a NATS outage (2
// minutes) and then retried, whose reservation would count twice.
func Open(ctx context.Context, js jetstream.JetStream, ttl time.Duration, replicas int) (*Store, error) {
	stream := "KV_" + Bucket
	cfg := jetstream.StreamConfig{
		Name:              stream,
		Description:       "jobs started by each flow (--flow-max-jobs)",
		Subjects:          []string{"$KV." + Bucket + ".>"},
		MaxMsgsPerSubject: 1,
		MaxBytes:          -1,
		MaxAge:            ttl,
		MaxMsgSize:        -1,
		MaxMsgs:           -1,
		MaxConsumers:      -1,
		Storage:           jetstream.FileStorage,
		Replicas:          bus.Replicas(ctx, js, stream, replicas),
		AllowRollup:       true,
		DenyDelete:        true,
		AllowDirect:       true,
		Duplicates:        min(Window, ttl),
		Discard:           jetstream.DiscardNew,
	}
	if s, err := js.Stream(ctx, stream); err == nil {
		// An operator's --store-limit (bus.ApplyStoreLimits) is kept.
		cfg.MaxBytes = s.CachedInfo().Config.MaxBytes
	}
	if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
		return nil, fmt.Errorf("open flow budget bucket %s: %w", Bucket, err)
	}
	kv, err := js.KeyValue(ctx, Bucket)
	if err != nil {
		return nil, fmt.Errorf("open flow budget bucket %s: %w", Bucket, err)
	}
	return &Store{js: js, kv: kv}, nil
}

// count is a flow's entry.
type count struct {
	// Jobs is how many jobs the flow's steps have started; the job that started the flow is
	// not among them.
	Jobs int `json:"jobs"`
}

// OverError is a reservation refused: the flow would start more jobs than its limit.
type OverError struct {
	Flow  string
	Have  int // the jobs the flow has started, its first included
	Want  int // the jobs the step would start
	Limit int
}

func (e *OverError) Error() string {
	return fmt.Sprintf("flow %s has started %d jobs and this step would start %d more, %d in all, more than --flow-max-jobs %d allows; "+
		"nothing was started: raise --flow-max-jobs, or map over fewer items (pass a reference to a volume and let one job do the work)",
		e.Flow, e.Have, e.Want, e.Have+e.Want, e.Limit)
}

// Reserve counts n more jobs for flow on behalf of the step whose reservation id is id (derived
// from its job: the same on every run of it). It returns an *OverError, and counts nothing,
// when the flow would pass limit, the job that started the flow counted too; limit <= 0 is no
// bound. A reservation made before under id (the step run again) is not counted again.
//
// again says the step may have reserved before (it is not its first attempt). Its own
// reservation is then in the count it reads, and a refusal is made only once the store says the
// step had none: it writes the count unchanged under id, which the store drops as a duplicate
// when the step had reserved.
func (s *Store) Reserve(ctx context.Context, flow, id string, n, limit int, again bool) error {
	subject := "$KV." + Bucket + "." + flow
	for range casTries {
		var c count
		var rev uint64
		e, err := s.kv.Get(ctx, flow)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return fmt.Errorf("read the jobs flow %s has started: %w", flow, err)
		default:
			if err := json.Unmarshal(e.Value(), &c); err != nil {
				return fmt.Errorf("decode the jobs flow %s has started: %w", flow, err)
			}
			rev = e.Revision()
		}
		next := c
		over := limit > 0 && 1+c.Jobs+n > limit
		if over && !again {
			return &OverError{Flow: flow, Have: 1 + c.Jobs, Want: n, Limit: limit}
		}
		if !over {
			next.Jobs += n
		}
		m := nats.NewMsg(subject)
		m.Data, _ = json.Marshal(next)
		ack, err := s.js.PublishMsg(ctx, m, jetstream.WithMsgID(id), jetstream.WithExpectLastSequencePerSubject(rev))
		var api *jetstream.APIError
		if errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			continue // another step of the flow counted meanwhile: read it again
		}
		if err != nil {
			return fmt.Errorf("count %d more jobs of flow %s: %w", n, flow, err)
		}
		if over && !ack.Duplicate {
			return &OverError{Flow: flow, Have: 1 + c.Jobs, Want: n, Limit: limit}
		}
		return nil
	}
	return fmt.Errorf("count %d more jobs of flow %s: its count changed %d times while this step read it; try again", n, flow, casTries)
}

// Started is how many jobs flow has started, its first included; 1 for a flow never counted.
func (s *Store) Started(ctx context.Context, flow string) (int, error) {
	e, err := s.kv.Get(ctx, flow)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 1, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the jobs flow %s has started: %w", flow, err)
	}
	var c count
	if err := json.Unmarshal(e.Value(), &c); err != nil {
		return 0, fmt.Errorf("decode the jobs flow %s has started: %w", flow, err)
	}
	return 1 + c.Jobs, nil
}
