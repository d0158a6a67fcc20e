package bus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
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
	// ResultStream keeps every result and error event, once each (see EnsureResultStream).
	ResultStream = "AGENT_RESULTS"
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
	// MaxPerSubject caps the triggers waiting on any one subject of the trigger stream
	// (agent.run.<fn>, webhook.<source>..., an on: subject): past it the stream refuses a new
	// one (DiscardNewPerSubject) and its publisher hears "maximum messages per subject
	// exceeded". 0 keeps what the stream has (none for a new one); -1 removes the cap.
	MaxPerSubject int64
	// Limits are the operator's limits by store name (a stream, a KV bucket or an object
	// store, as `serve --store-limit` names it); a store without one keeps its default.
	Limits map[string]StoreLimit
}

// StoreLimit bounds one store. Zero fields take the store's default; Bytes -1 is no bound.
type StoreLimit struct {
	Bytes int64
	// Age bounds how long a stream keeps a message; buckets' ages are what their entries mean
	// (a job record's TTL, a host's heartbeat) and are set elsewhere.
	Age time.Duration
}

// limit is o's limit for store, each zero field filled from def.
func (o StreamOptions) limit(store string, def StoreLimit) StoreLimit {
	l := o.Limits[store]
	if l.Bytes == 0 {
		l.Bytes = def.Bytes
	}
	if l.Age == 0 {
		l.Age = def.Age
	}
	return l
}

// Default limits of the results stream: a week of results, at most 1 GiB, the oldest going
// first.
const (
	DefaultResultMaxAge   = 7 * 24 * time.Hour
	DefaultResultMaxBytes = 1 << 30
	// DefaultLogMaxBytes bounds the log stream: the oldest lines go first.
	DefaultLogMaxBytes = 1 << 30
)

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
		o.LogMaxBytes = DefaultLogMaxBytes
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
	want := []string{RunPrefix + ">", WebhookSubjects}
	for _, s := range subjects {
		want = append(want, TriggerIn(s))
	}
	want = MergeSubjects(want)
	runLimit := o.limit(RunStream, StoreLimit{Bytes: -1, Age: o.MaxAge})
	_, limited := o.Limits[RunStream]
	s, err := js.Stream(ctx, RunStream)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		s, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name:             RunStream,
			Description:      "function triggers (agent.run.> and on: subjects)",
			Subjects:         want,
			SubjectTransform: runTransform(),
			Retention:        jetstream.InterestPolicy,
			Storage:          jetstream.FileStorage,
			Duplicates:       o.Duplicates,
			MaxAge:           runLimit.Age,
			MaxBytes:         runLimit.Bytes,
			// A full trigger stream refuses the new trigger, which its publisher hears, rather
			// than drop the oldest one, which someone was told was accepted.
			Discard:              jetstream.DiscardNew,
			MaxMsgsPerSubject:    perSubject(o.MaxPerSubject),
			DiscardNewPerSubject: o.MaxPerSubject > 0,
			Replicas:             max(o.Replicas, 1),
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
	// Without a --store-limit of its own the stream keeps the limits it has, which another
	// host may have set.
	relimit := limited && (cfg.MaxBytes != runLimit.Bytes || cfg.MaxAge != runLimit.Age || cfg.Discard != jetstream.DiscardNew)
	recap := o.MaxPerSubject != 0 && (cfg.MaxMsgsPerSubject != perSubject(o.MaxPerSubject) || cfg.DiscardNewPerSubject != (o.MaxPerSubject > 0))
	if recap {
		cfg.MaxMsgsPerSubject, cfg.DiscardNewPerSubject = perSubject(o.MaxPerSubject), o.MaxPerSubject > 0
		if cfg.DiscardNewPerSubject {
			cfg.Discard = jetstream.DiscardNew // the server takes DiscardNewPerSubject only with it
		}
	}
	if slices.Equal(merged, MergeSubjects(cfg.Subjects)) && cfg.SubjectTransform != nil && !relimit && !recap {
		return s, nil
	}
	if relimit {
		cfg.MaxBytes, cfg.MaxAge, cfg.Discard = runLimit.Bytes, runLimit.Age, jetstream.DiscardNew
	}
	switch t := cfg.SubjectTransform; {
	case t == nil:
		// A stream of an older host: it captured agent.result.<fn> itself, and still does (a
		// subject is never taken away from a shared stream); those copies, republished by the
		// results stream, carry the same message id as the ones on TriggersIn and deduplicate.
		cfg.SubjectTransform = runTransform()
	case *t != *runTransform():
		return nil, fmt.Errorf("stream %s has the subject transform %s -> %s, not the host's %s -> %s: remove it (`nats stream edit %s`)",
			RunStream, t.Source, t.Destination, runTransform().Source, runTransform().Destination, RunStream)
	}
	cfg.Subjects = merged
	s, err = js.UpdateStream(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("widen stream %s to subjects %v: %w (a subject may already belong to another stream)", RunStream, merged, err)
	}
	return s, nil
}

// perSubject is the trigger stream's MaxMsgsPerSubject for StreamOptions.MaxPerSubject.
func perSubject(n int64) int64 {
	if n <= 0 {
		return -1
	}
	return n
}

// runTransform stores what the host queues on TriggersIn for the functions listening on results
// and error events under the subject they listen on: agent.result.<fn>, agent.error.<fn>.
func runTransform() *jetstream.SubjectTransformConfig {
	return &jetstream.SubjectTransformConfig{Source: TriggersIn + ">", Destination: outputsRoot + ">"}
}

// EnsureResultStream creates the stream that keeps every result and error event, once each,
// for a while (DefaultResultMaxAge, DefaultResultMaxBytes, or the operator's limit; the oldest
// go first), so that a job that ran again publishes a duplicate the stream drops, and
// `nats stream view AGENT_RESULTS` or a consumer reads yesterday's results.
//
// Why the stream captures OutputsIn and republishes, rather than capturing agent.result.> and
// agent.error.> themselves:
//   - A plain `nats sub 'agent.result.>'` hears every publish on the subject, a duplicate the
//     stream drops included. The stream republishes on agent.result.<fn> only what it stored, so
//     a plain subscriber (`host invoke --wait`, client.WatchResult, POST /run, MCP, a caller
//     user, whose permissions allow agent.result.> and agent.error.>) hears each result once,
//     with the job's headers, as before.
//   - Two streams may not capture overlapping subjects, and the trigger stream must keep the
//     results that functions listen on (on: agent.result.<fn>, on: agent.error.>, a join's
//     agent.error.<step>), acknowledged. So the host queues those on TriggersIn, a subject only
//     the trigger stream captures and stores as agent.result.<fn> (runTransform): the functions'
//     consumers, their filters and the subject a job sees are as before, and no plain
//     subscriber hears that copy. The republished copy is never what a function runs on: a core
//     message, unacknowledged.
//
// The duplicate window is the trigger stream's (StreamOptions.Duplicates, 20 minutes): a job
// run again within it (a host died after publishing, before its record said so) publishes a
// result the stream drops and nobody hears again. The server's transform on '>' with an
// explicit source is what it calls a republish without a cycle: the destination agent.> does
// not collide with OutputsIn.
func EnsureResultStream(ctx context.Context, js jetstream.JetStream, o StreamOptions) (jetstream.Stream, error) {
	o = o.withDefaults()
	l := o.limit(ResultStream, StoreLimit{Bytes: DefaultResultMaxBytes, Age: DefaultResultMaxAge})
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:             ResultStream,
		Description:      "results and error events, once each (agent.result.<function>, agent.error.<function>)",
		Subjects:         []string{OutputsIn + ">"},
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: OutputsIn + ">", Destination: outputsRoot + ">"},
		RePublish:        &jetstream.RePublish{Source: outputsRoot + ">", Destination: outputsRoot + ">"},
		Retention:        jetstream.LimitsPolicy,
		Storage:          jetstream.FileStorage,
		MaxAge:           l.Age,
		MaxBytes:         l.Bytes,
		Discard:          jetstream.DiscardOld,
		Duplicates:       o.Duplicates,
		Replicas:         Replicas(ctx, js, ResultStream, o.Replicas),
	})
	if err != nil {
		return nil, fmt.Errorf("create stream %s (max bytes %d, max age %s): %w%s", ResultStream, l.Bytes, l.Age, err, noRoomHint(ResultStream, err))
	}
	return s, nil
}

// noRoomHint is what to do about a stream whose max bytes the server's store has no room left
// to reserve (an external NATS, whose store the host cannot size its defaults to): "" for any
// other error.
func noRoomHint(stream string, err error) string {
	var api *jetstream.APIError
	if !errors.As(err, &api) || (api.ErrorCode != 10047 && api.ErrorCode != 10023) {
		return ""
	}
	return fmt.Sprintf("; the server's JetStream store (max_file_store) has no room left for its max bytes: start serve with --store-limit %s=<size> small enough to fit (e.g. 256Mi), or give the store more room", stream)
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
	logLimit := o.limit(LogStream, StoreLimit{Bytes: o.LogMaxBytes, Age: o.LogMaxAge})
	cfg := jetstream.StreamConfig{
		Name:        LogStream,
		Description: "job output lines (agent.logs.<function>.<job>)",
		Subjects:    []string{LogsPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		MaxAge:      logLimit.Age,
		MaxBytes:    logLimit.Bytes,
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
		return nil, fmt.Errorf("create stream %s (max bytes %d, max age %s): %w%s", LogStream, logLimit.Bytes, logLimit.Age, err, noRoomHint(LogStream, err))
	}
	return s, nil
}

// EnsureDeadStream creates the dead-letter stream: the original trigger (body and headers) of
// every job that failed for good, with its last error, kept 30 days for inspection and replay.
func EnsureDeadStream(ctx context.Context, js jetstream.JetStream, o StreamOptions) (jetstream.Stream, error) {
	o = o.withDefaults()
	l := o.limit(DeadStream, StoreLimit{Bytes: -1, Age: 30 * 24 * time.Hour})
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        DeadStream,
		Description: "dead letters: triggers of jobs that failed for good (agent.dead.<function>.<job>)",
		Subjects:    []string{DeadPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		MaxAge:      l.Age,
		MaxBytes:    l.Bytes,
		Duplicates:  o.Duplicates,
		Replicas:    Replicas(ctx, js, DeadStream, o.Replicas),
	})
	if err != nil {
		return nil, fmt.Errorf("create stream %s (max bytes %d, max age %s): %w", DeadStream, l.Bytes, l.Age, err)
	}
	return s, nil
}

// MaxDeliver bounds how often a trigger is delivered; the host gives up on it (dead letter)
// at the last delivery.
const MaxDeliver = 128

// FlowMaxDeliver is MaxDeliver for a function with flow control (limit:, rate:): a message
// waiting its turn is handed back and delivered again each time it looks, which is not an
// attempt (the host counts attempts apart from those deliveries), and may wait for hours.
const FlowMaxDeliver = 1_000_000

// ConsumerOption changes the configuration EnsureConsumer makes.
type ConsumerOption func(*jetstream.ConsumerConfig)

// WaitsForFlow is the consumer option of a function with flow control (FlowMaxDeliver).
func WaitsForFlow(waits bool) ConsumerOption {
	return func(c *jetstream.ConsumerConfig) {
		if waits {
			c.MaxDeliver = FlowMaxDeliver
		}
	}
}

// ConsumerName is the durable consumer that every host serving a function shares.
func ConsumerName(function string) string { return "fn_" + function }

// EnsureConsumer creates or updates the durable pull consumer of a function. Every host serving
// the function binds to the same consumer, so adding hosts spreads the work.
//
// queue is the function's queue: limit (0: none), kept in the consumer's metadata, where every
// caller that queues a job through package client reads it (QueueLimit).
func EnsureConsumer(ctx context.Context, s jetstream.Stream, function string, subjects []string, ackWait time.Duration, queue int, opts ...ConsumerOption) (jetstream.Consumer, error) {
	filters := MergeSubjects(subjects)
	var meta map[string]string
	if queue > 0 {
		meta = map[string]string{queueMetadata: strconv.Itoa(queue)}
	}
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
		Metadata:      meta,
	}
	for _, o := range opts {
		o(&cfg)
	}
	c, err := s.CreateOrUpdateConsumer(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("create consumer %s on %v: %w", cfg.Durable, filters, err)
	}
	return c, nil
}

// queueMetadata is the consumer metadata key of a function's queue: limit.
const queueMetadata = "agenthost.queue"

// ErrQueueFull is a call refused because its function's queue: limit is reached.
var ErrQueueFull = errors.New("the function's queue is full")

// QueueLimit is the queue: limit a function's consumer carries, 0 when none.
func QueueLimit(cfg jetstream.ConsumerConfig) int {
	n, err := strconv.Atoi(cfg.Metadata[queueMetadata])
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// CheckQueue refuses a call for function when its consumer (info, as just read) holds its
// queue: limit's worth of triggers, waiting or running; nil otherwise. Calls racing each other
// may pass the limit by a few: it bounds a flood, not an exact count.
func CheckQueue(function string, info *jetstream.ConsumerInfo) error {
	if info == nil {
		return nil
	}
	limit := QueueLimit(info.Config)
	held := info.NumPending + uint64(info.NumAckPending)
	if limit <= 0 || held < uint64(limit) {
		return nil
	}
	return fmt.Errorf("function %q: %w: %d triggers wait or run (queue: %d); nothing was queued: send it again once its jobs have run",
		function, ErrQueueFull, held, limit)
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

// HostStreams are the streams the host makes itself, whose limits their Ensure functions set.
var HostStreams = []string{RunStream, ResultStream, LogStream, DeadStream}

// ApplyStoreLimits sets the operator's size limits on the KV buckets and object stores the
// host opened (their streams KV_<bucket> and OBJ_<bucket>) and on its other streams by name
// (AGENT_AUDIT); the host's own streams take theirs when they are made. A name that is no store of the host's, or a limit the server refuses,
// is an error with the server's reason. A bucket keeps refusing writes when full (KV and
// object stores discard new): its oldest entries are never dropped to make room.
func ApplyStoreLimits(ctx context.Context, js jetstream.JetStream, limits map[string]StoreLimit) error {
	names := slices.Sorted(maps.Keys(limits))
	for _, name := range names {
		l := limits[name]
		if slices.Contains(HostStreams, name) {
			continue
		}
		if l.Age != 0 {
			return fmt.Errorf("store limit %s: an age applies to the host's streams (%v) only; a bucket's entries live as long as what they record does", name, HostStreams)
		}
		var s jetstream.Stream
		var err error
		for _, stream := range []string{"KV_" + name, "OBJ_" + name, name} {
			if s, err = js.Stream(ctx, stream); !errors.Is(err, jetstream.ErrStreamNotFound) {
				break
			}
		}
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("store limit %s: no such stream, KV bucket or object store; the host's are %v", name, storeNames(ctx, js))
		}
		if err != nil {
			return fmt.Errorf("store limit %s: look up its stream: %w", name, err)
		}
		cfg := s.CachedInfo().Config
		if cfg.MaxBytes == l.Bytes {
			continue
		}
		cfg.MaxBytes = l.Bytes
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("store limit %s: set max bytes %d on %s: %w", name, l.Bytes, cfg.Name, err)
		}
	}
	return nil
}

// storeNames lists the stores on the server by the names a store limit takes.
func storeNames(ctx context.Context, js jetstream.JetStream) []string {
	var out []string
	names := js.StreamNames(ctx)
	for n := range names.Name() {
		n = strings.TrimPrefix(strings.TrimPrefix(n, "KV_"), "OBJ_")
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
