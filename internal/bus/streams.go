package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Names of what the host keeps in JetStream.
const (
	// RunStream holds every trigger: agent.run.>, webhook.> and each function's on: subjects.
	RunStream = "AGENT_RUN"
	// LogStream keeps job output lines for `host logs` after the fact.
	LogStream = "AGENT_LOGS"
	// DeadStream keeps the original message of every job that gave up, for `host dead`.
	DeadStream = "AGENT_DEAD"
	// DeadPrefix is the dead letters' subject prefix: agent.dead.<function>.<job>.
	DeadPrefix = "agent.dead."
)

// DeadSubject is where the dead letter of a job is kept.
func DeadSubject(function, jobID string) string { return DeadPrefix + function + "." + jobID }

// StreamOptions tune the streams; zero values take the defaults.
type StreamOptions struct {
	// Duplicates is the window in which a repeated Nats-Msg-Id is dropped. It bounds how long
	// after a run its redelivery still cannot trigger the next step twice.
	Duplicates time.Duration
	// MaxAge bounds how long an unconsumed trigger waits.
	MaxAge time.Duration
	// LogMaxAge and LogMaxBytes bound the log stream.
	LogMaxAge   time.Duration
	LogMaxBytes int64
	// Replicas for clustered JetStream; 0 keeps what exists (1 for new streams).
	Replicas int
}

func (o StreamOptions) withDefaults() StreamOptions {
	if o.Duplicates == 0 {
		o.Duplicates = 20 * time.Minute
	}
	if o.MaxAge == 0 {
		o.MaxAge = 7 * 24 * time.Hour
	}
	if o.LogMaxAge == 0 {
		o.LogMaxAge = 24 * time.Hour
	}
	if o.LogMaxBytes == 0 {
		o.LogMaxBytes = 1 << 30
	}
	return o
}

// EnsureRunStream creates the trigger stream or widens it to cover subjects. Subjects that other
// hosts added are kept: hosts with different function sets share one stream.
//
// Retention is by interest: a message stays until every function consuming its subject has
// acknowledged it, which lets several functions listen on one subject (fan-out) while nothing
// is kept that no function will ever take.
func EnsureRunStream(ctx context.Context, js jetstream.JetStream, subjects []string, o StreamOptions) (jetstream.Stream, error) {
	o = o.withDefaults()
	want := MergeSubjects(append([]string{RunPrefix + ">", WebhookSubjects}, subjects...))
	s, err := js.Stream(ctx, RunStream)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		s, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name:        RunStream,
			Description: "function triggers (agent.run.> and on: subjects)",
			Subjects:    want,
			Retention:   jetstream.InterestPolicy,
			Storage:     jetstream.FileStorage,
			Duplicates:  o.Duplicates,
			MaxAge:      o.MaxAge,
			Replicas:    max(o.Replicas, 1),
		})
		if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return nil, fmt.Errorf("create stream %s with subjects %v: %w", RunStream, want, err)
		}
		if err == nil {
			return s, nil
		}
		// Another host created it in the meantime: fall through and widen it.
		if s, err = js.Stream(ctx, RunStream); err != nil {
			return nil, fmt.Errorf("look up stream %s: %w", RunStream, err)
		}
	case err != nil:
		return nil, fmt.Errorf("look up stream %s: %w", RunStream, err)
	}
	cfg := s.CachedInfo().Config
	merged := MergeSubjects(append(slices.Clone(cfg.Subjects), want...))
	if slices.Equal(merged, MergeSubjects(cfg.Subjects)) {
		return s, nil
	}
	cfg.Subjects = merged
	s, err = js.UpdateStream(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("widen stream %s to subjects %v: %w (a subject may already belong to another stream)", RunStream, merged, err)
	}
	return s, nil
}

// EnsureLogStream creates the stream that keeps job output lines.
//
// Logs are not the durable data (results, records and volumes are), and a job may print
// hundreds of thousands of lines: a single-replica log stream persists asynchronously, not with
// a disk sync per line even on a server that syncs every write (serve's default). A replicated
// stream cannot (the server refuses async persistence there) and needs none: its replicas are
// its safety. A stream's persist mode cannot change once created, so an existing stream keeps
// its own; delete the stream (`nats stream rm AGENT_LOGS`, losing the kept logs) to get the
// new mode.
func EnsureLogStream(ctx context.Context, js jetstream.JetStream, o StreamOptions) (jetstream.Stream, error) {
	o = o.withDefaults()
	cfg := jetstream.StreamConfig{
		Name:        LogStream,
		Description: "job output lines (agent.logs.<function>.<job>)",
		Subjects:    []string{LogsPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		MaxAge:      o.LogMaxAge,
		MaxBytes:    o.LogMaxBytes,
		Discard:     jetstream.DiscardOld,
		Replicas:    Replicas(ctx, js, LogStream, o.Replicas),
	}
	if cfg.Replicas == 1 {
		cfg.PersistMode = jetstream.AsyncPersistMode
	}
	if s, err := js.Stream(ctx, LogStream); err == nil {
		cfg.PersistMode = s.CachedInfo().Config.PersistMode
	}
	s, err := js.CreateOrUpdateStream(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("create stream %s: %w", LogStream, err)
	}
	return s, nil
}

// EnsureDeadStream creates the dead-letter stream: the original trigger (body and headers) of
// every job that failed for good, with its last error, kept 30 days for inspection and replay.
func EnsureDeadStream(ctx context.Context, js jetstream.JetStream, o StreamOptions) (jetstream.Stream, error) {
	o = o.withDefaults()
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        DeadStream,
		Description: "dead letters: triggers of jobs that failed for good (agent.dead.<function>.<job>)",
		Subjects:    []string{DeadPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		MaxAge:      30 * 24 * time.Hour,
		Duplicates:  o.Duplicates,
		Replicas:    Replicas(ctx, js, DeadStream, o.Replicas),
	})
	if err != nil {
		return nil, fmt.Errorf("create stream %s: %w", DeadStream, err)
	}
	return s, nil
}

// MaxDeliver bounds how often a trigger is delivered; the host gives up on it (dead letter)
// at the last delivery.
const MaxDeliver = 128

// ConsumerName is the durable consumer that every host serving a function shares.
func ConsumerName(function string) string { return "fn_" + function }

// EnsureConsumer creates or updates the durable pull consumer of a function. Every host serving
// the function binds to the same consumer, so adding hosts spreads the work.
func EnsureConsumer(ctx context.Context, s jetstream.Stream, function string, subjects []string, ackWait time.Duration) (jetstream.Consumer, error) {
	filters := MergeSubjects(subjects)
	cfg := jetstream.ConsumerConfig{
		Durable:        ConsumerName(function),
		Description:    "runs of function " + function,
		FilterSubjects: filters,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        ackWait,
		// A new function starts from now rather than replaying what other functions left.
		DeliverPolicy: jetstream.DeliverNewPolicy,
		// A backstop only: the host settles a job long before this (its retries: are at most
		// 100, a job waiting for its volume store 12). A message that kills every host that
		// takes it ends here, in the dead letters, instead of going round for ever.
		MaxDeliver:    MaxDeliver,
		MaxAckPending: 10_000,
	}
	c, err := s.CreateOrUpdateConsumer(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("create consumer %s on %v: %w", cfg.Durable, filters, err)
	}
	return c, nil
}

// Replicas is the replica count to create or update a stream with: want when it is set, else
// what the stream has now, else 1. A host or a command started without --replicas must never
// shrink what a cluster's hosts made R3. KeyValue buckets are the streams "KV_<bucket>", object
// stores "OBJ_<bucket>".
func Replicas(ctx context.Context, js jetstream.JetStream, stream string, want int) int {
	if want > 0 {
		return want
	}
	if s, err := js.Stream(ctx, stream); err == nil {
		return max(s.CachedInfo().Config.Replicas, 1)
	}
	return 1
}
