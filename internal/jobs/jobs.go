// Package jobs keeps one record per job in a JetStream KeyValue bucket: what ran, where, when,
// how it ended. The host writes them, `host invoke` writes a job's first (queued) and `host
// cancel` a waiting job's last; `host jobs`, `host job` and `host invoke --wait` read them.
// It also holds the job's other wire formats (wire.go): the error event and the dead letter.
package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/people"
)

// Bucket is the KeyValue bucket holding job records, keyed by job id.
const Bucket = "agent_jobs"

// Record is everything known about one job, as JSON under its id in the agent_jobs bucket
// (`host job <id> --json` prints it). One record per job, rewritten as the job moves:
//
//	id            the job id: the trigger's Nats-Msg-Id, or one derived from its stream position
//	function      the function it runs
//	flow_id       the flow it belongs to (the first job's id unless the trigger named one)
//	parent_job    the job whose output triggered it, in a flow
//	subject       the subject its trigger came on
//	hop           the steps before this one in its flow
//	status        queued, running, retrying, succeeded, failed or canceled (see Status)
//	attempts      how many times it has been delivered, this one included
//	host          the host that ran the last attempt
//	enqueued      when its trigger was stored
//	started       when the last attempt started
//	finished      when the last attempt ended; absent while it runs
//	exit_code     the process's exit code; absent when it never ran or was killed
//	error         why the last attempt did not succeed; a final record the store refused (too
//	              big for its limit) is replaced by a minimal one, failed, whose error says so
//	result        the result, when it is at most MaxResultBytes
//	result_bytes  the size of the result, kept or not
//	outputs       the subjects its result or error event went to
//	volumes       what it did with each of its volumes (see Volume)
//	replayed_from the job whose dead letter this one replays (`host dead replay`)
//	replayed_as   the jobs that replayed this job's dead letter, oldest first
//	caller        who asked for it, as the caller named itself on its trigger (Job-Caller):
//	              "mcp <client>/<version>" for an MCP tools/call; absent when none did
//	log_last_seq  the AGENT_LOGS stream sequence of the last log line of its last attempt, so
//	              that a reader knows it has every line (invoke --wait, logs -f); absent when
//	              it logged nothing
//	log_truncated the log bytes published before its output passed --max-output-bytes; absent
//	              when nothing was cut (the log then ends with an "[host] output truncated" line)
//	log_lost      log lines lost because NATS did not take them (it was unreachable); absent
//	              when none were
//	args          the arguments it was triggered with, as sent ($secret: references, never
//	              values), so that it can be shown and run again; absent when they were not
//	              JSON, or over MaxArgsBytes (but a step waiting for approval keeps them
//	              whatever their size: its next steps are routed by them when it is decided),
//	              and in records written before every job kept them
//	args_bytes    the size of the arguments, kept or not; absent in records written before
//	approval      a step with approve: its decision, or when it expires while it waits
//	not_before    when it may run: its trigger's time plus its function's delay; absent for a
//	              function without one
//	deferrals     how often its trigger came up before not_before, or while its function's
//	              flow control held it, and was handed back to wait; those deliveries are not
//	              attempts
//	held          why it waits for its function's flow control (limit:, rate:), while it does
//	args_sha256   the SHA-256 of the arguments it was triggered with (see ArgsHash), so that a
//	              caller's job id, an idempotency key, stays bound to them; absent in records
//	              written before it existed
//	scheduled     the tick of a scheduled run, for a job its function's schedule: started (a
//	              trigger whose message id is the tick's, which no caller can take); absent
//	              otherwise, and in records written before it existed
//	started_by    who or what started the job, in words: "user ada", "operator root@vm",
//	              "webhook github", "schedule nightly", "flow step plan (job <id>)", "MCP client
//	              claude-code/1.0", "replay of job <id> by …"; what a host cannot vouch for is
//	              said as a claim: "a NATS client (says …)", or "a NATS client" when nothing
//	              says; absent in records written before it existed
//	starter       the user name of the person who started the job's flow (a flow's later steps
//	              inherit it), only when a host vouches for it; absent when no person did (or
//	              none the host can vouch for). The self-approval rule reads it: the starter may
//	              not decide the flow's approvals
type Record struct {
	ID        string         `json:"id"`
	Function  string         `json:"function"`
	FlowID    string         `json:"flow_id"`
	ParentJob string         `json:"parent_job,omitempty"`
	Subject   string         `json:"subject"`
	Hop       int            `json:"hop"`
	Status    jobtype.Status `json:"status"`
	Attempts  int            `json:"attempts"`
	Host      string         `json:"host,omitempty"`
	Enqueued  time.Time      `json:"enqueued"`
	Started   time.Time      `json:"started"`
	Finished  time.Time      `json:"finished,omitzero"`
	// RunEnded is when the run of a step that waits for a decision (approve:) ended: its
	// Finished is then when the decision came, and the time between is a person's, not work.
	// Zero for every other job, whose run ends at Finished.
	RunEnded     time.Time        `json:"run_ended,omitzero"`
	ExitCode     *int             `json:"exit_code,omitempty"`
	Error        string           `json:"error,omitempty"`
	Result       json.RawMessage  `json:"result,omitempty"`
	ResultBytes  int              `json:"result_bytes,omitempty"`
	Outputs      []string         `json:"outputs,omitempty"`
	Volumes      []jobtype.Volume `json:"volumes,omitempty"`
	ReplayedFrom string           `json:"replayed_from,omitempty"`
	ReplayedAs   []string         `json:"replayed_as,omitempty"`
	Caller       string           `json:"caller,omitempty"`
	// The log fields are new; records without them read as "nothing known", which is what
	// a reader did before they existed.
	LogLastSeq   uint64          `json:"log_last_seq,omitempty"`
	LogTruncated int64           `json:"log_truncated,omitempty"`
	LogLost      int             `json:"log_lost,omitempty"`
	ArgsSHA256   string          `json:"args_sha256,omitempty"`
	Args         json.RawMessage `json:"args,omitempty"`
	ArgsBytes    int             `json:"args_bytes,omitempty"`
	Approval     *Approval       `json:"approval,omitempty"`
	NotBefore    time.Time       `json:"not_before,omitzero"`
	Deferrals    int             `json:"deferrals,omitempty"`
	// Held is why a job that has not started waits for its function's flow control ("waiting
	// for limit: repo=acme/api, 1 running"); absent once it starts, and for any other job.
	Held string `json:"held,omitempty"`
	// SupersededBy is, for a superseded job (debounce:), the newer message's job that runs in
	// its place; that one may be superseded in turn, so following it leads to the run.
	SupersededBy string    `json:"superseded_by,omitempty"`
	Scheduled    time.Time `json:"scheduled,omitzero"`
	// Served is how a jailed job got its jail: fork, warm, reuse or cold (jobtype.Outcome.Served).
	Served    string `json:"served,omitempty"`
	StartedBy string `json:"started_by,omitempty"`
	Starter   string `json:"starter,omitempty"`

	// Deployment is the deployment the job's flow started under, whose version of the
	// function it ran (serve --deployed); 0 when served from a directory.
	Deployment int `json:"deployment,omitempty"`
	// Version is the content hash of the code it ran.
	Version string `json:"version,omitempty"`
	// Trace is the W3C traceparent of the job's span (serve --otlp-endpoint): what the job's
	// next steps carry on, and, by its trace id, the dashboard's link to the flow's trace; ""
	// when tracing is off.
	Trace      string `json:"trace,omitempty"`
	TraceState string `json:"trace_state,omitempty"`
}

// MaxResultBytes bounds the result copy kept in a record; larger results are only published.
const MaxResultBytes = 64 << 10

// QueueWait is how long the job waited between its trigger and its start.
func (r *Record) QueueWait() time.Duration {
	if r.Started.IsZero() || r.Enqueued.IsZero() {
		return 0
	}
	return r.Started.Sub(r.Enqueued)
}

// RunTime is how long the last attempt ran, or has been running: for a step that waited for
// a decision, until its run ended, not until the decision.
func (r *Record) RunTime() time.Duration { return r.summary().Run(time.Now()) }

// DecisionWait is how long a step waited for a decision after its run ended: until the
// decision (or the timeout) when it came, or until now while it waits; 0 for any other job.
func (r *Record) DecisionWait(now time.Time) time.Duration {
	if r.RunEnded.IsZero() {
		return 0
	}
	if r.Status.Final() && !r.Finished.IsZero() {
		return r.Finished.Sub(r.RunEnded)
	}
	return now.Sub(r.RunEnded)
}

// ErrNotFound is returned for a job id that has no record.
var ErrNotFound = errors.New("no such job")

// FlowsBucket holds a mark for every canceled flow, keyed by flow id: whoever takes a job of
// one afterwards, on any host, cancels it instead of running it.
const FlowsBucket = "agent_canceled_flows"

// Store reads and writes job records.
type Store struct {
	kv     jetstream.KeyValue
	flows  jetstream.KeyValue
	js     jetstream.JetStream
	stream jetstream.Stream
}

// Open creates the bucket if needed; the host calls it at start.
func Open(ctx context.Context, js jetstream.JetStream, ttl time.Duration, replicas int) (*Store, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      Bucket,
		Description: "job records",
		History:     1,
		TTL:         ttl,
		Storage:     jetstream.FileStorage,
		Replicas:    bus.Replicas(ctx, js, "KV_"+Bucket, replicas),
	})
	if err != nil {
		return nil, fmt.Errorf("open job bucket %s: %w", Bucket, err)
	}
	flows, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      FlowsBucket,
		Description: "canceled flows",
		TTL:         ttl, // as long as their jobs' records
		Storage:     jetstream.FileStorage,
		Replicas:    bus.Replicas(ctx, js, "KV_"+FlowsBucket, replicas),
	})
	if err != nil {
		return nil, fmt.Errorf("open canceled flows bucket %s: %w", FlowsBucket, err)
	}
	return newStore(ctx, js, kv, flows)
}

func newStore(ctx context.Context, js jetstream.JetStream, kv, flows jetstream.KeyValue) (*Store, error) {
	stream, err := js.Stream(ctx, "KV_"+Bucket)
	if err != nil {
		return nil, fmt.Errorf("open job bucket %s: %w", Bucket, err)
	}
	return &Store{kv: kv, flows: flows, js: js, stream: stream}, nil
}

// Bind attaches to an existing bucket; clients use it.
func Bind(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	kv, err := js.KeyValue(ctx, Bucket)
	if err != nil {
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, fmt.Errorf("job bucket %s not found: has a host (`host serve`) ever run against this NATS?", Bucket)
		}
		return nil, fmt.Errorf("open job bucket %s: %w", Bucket, err)
	}
	// A host older than canceled flows made no bucket for them: canceling a flow says so.
	flows, err := js.KeyValue(ctx, FlowsBucket)
	if err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("open canceled flows bucket %s: %w", FlowsBucket, err)
	}
	return newStore(ctx, js, kv, flows)
}

// Get reads one record.
func (s *Store) Get(ctx context.Context, id string) (*Record, error) {
	e, err := s.get(ctx, id)
	if err != nil {
		return nil, err
	}
	return decode(e)
}

func (s *Store) get(ctx context.Context, id string) (jetstream.KeyValueEntry, error) {
	e, err := s.kv.Get(ctx, id)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, fmt.Errorf("job %s: %w", id, ErrNotFound)
		}
		if errors.Is(err, jetstream.ErrInvalidKey) {
			return nil, fmt.Errorf("job %q: %w (job ids are letters, digits, - and _)", id, ErrNotFound)
		}
		return nil, fmt.Errorf("read job %s: %w", id, err)
	}
	return e, nil
}

func decode(e jetstream.KeyValueEntry) (*Record, error) {
	var r Record
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return nil, fmt.Errorf("decode job %s: %w", e.Key(), err)
	}
	return &r, nil
}

// List returns the records that keep says yes to, newest first. It reads every record; Recent
// reads only those it returns.
func (s *Store) List(ctx context.Context, keep func(*Record) bool) ([]*Record, error) {
	w, err := s.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	defer w.Stop()
	var out []*Record
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("list jobs: %w", ctx.Err())
		case e := <-w.Updates():
			if e == nil { // the watcher has delivered every current value
				slices.SortFunc(out, func(a, b *Record) int { return b.When().Compare(a.When()) })
				return out, nil
			}
			r, err := decode(e)
			if err != nil {
				continue // a record this version cannot read is not worth failing the listing for
			}
			if keep == nil || keep(r) {
				out = append(out, r)
			}
		}
	}
}

// WaitFinal blocks until job id has a final record and returns it.
func (s *Store) WaitFinal(ctx context.Context, id string) (*Record, error) {
	w, err := s.kv.Watch(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("watch job %s: %w", id, err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for job %s: %w", id, ctx.Err())
		case e := <-w.Updates():
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			r, err := decode(e)
			if err != nil {
				return nil, err
			}
			if r.Status.Final() {
				return r, nil
			}
		}
	}
}

// Approval is the decision a step with approve: waits for, in its record.
//
//	expires   when it fails for want of one
//	groups    the groups whose members may decide it (approve: ... by <group>,...), as the
//	          function said when the step began to wait; absent: any approver
//	decision  approved or rejected; absent while it waits, or when it timed out
//	by        who decided: a user's name, or what a face knows of the operator or a link
//	comment   what they said
//	at        when
type Approval struct {
	Expires  time.Time `json:"expires"`
	Groups   []string  `json:"groups,omitempty"`
	Decision string    `json:"decision,omitempty"`
	By       string    `json:"by,omitempty"`
	Comment  string    `json:"comment,omitempty"`
	At       time.Time `json:"at,omitzero"`
	// Timer is the stream sequence of the trigger that fails it at Expires, which a decision
	// removes.
	Timer uint64 `json:"timer,omitempty"`
	// Stage is set for approve: ... stage; Staged are the volumes the step changed, each held
	// as a version of its own until the decision.
	Stage  bool           `json:"stage,omitempty"`
	Staged []StagedVolume `json:"staged,omitempty"`
}

// StagedVolume is one volume a staged step (approve: ... stage) changed (see
// jobtype.StagedVolume, which the runner fills in).
type StagedVolume = jobtype.StagedVolume

// MaxStagedPaths bounds each path list of a StagedVolume.
const MaxStagedPaths = jobtype.MaxStagedPaths

// The decisions of an approval.
const (
	Approved = "approved"
	Rejected = "rejected"
)

// DecideRequest is what the hosts' faces send on bus.ApprovalsDecideSubject: decide job (approve
// or reject) on behalf of by, who is whoever that face authenticated. The host that answers
// signs the decision (ids.DecisionSig) and queues it on the job's function; the job's record
// says what became of it.
type DecideRequest struct {
	Job      string `json:"job"`
	Decision string `json:"decision"`
	By       string `json:"by"`
	Comment  string `json:"comment,omitempty"`
	// Who is the principal the face authenticated; the host checks the decision against it
	// (role, the gate's groups, not the flow's own starter). Absent: the operator named By.
	// On a user's own subject (bus.UserDecideSubject) it is ignored: the subject names the user.
	Who *people.Principal `json:"who,omitempty"`
	// Wait asks the host to answer once the decision is settled, with the record it left
	// (DecideReply.Record): for a face that cannot read the job records itself (a user's own
	// NATS login).
	Wait bool `json:"wait,omitempty"`
}

// DecideReply answers a DecideRequest: the decision is queued (Error empty), or why not.
type DecideReply struct {
	Function string `json:"function,omitempty"`
	Host     string `json:"host,omitempty"`
	Error    string `json:"error,omitempty"`
	// NotWaiting says the job waits for no decision (decided, timed out, canceled, or never
	// an approval): nothing changed.
	NotWaiting bool `json:"not_waiting,omitempty"`
	// Refused says the decider may not decide this step (its role, the gate's groups, or it
	// started the flow); Error says which.
	Refused bool `json:"refused,omitempty"`
	// Record is the job's record once the decision was settled, when the request asked to
	// Wait for it.
	Record *Record `json:"record,omitempty"`
}

// CanceledFlow is the mark of a canceled flow.
type CanceledFlow struct {
	By string    `json:"by"`
	At time.Time `json:"at"`
}

// CancelFlow marks flow canceled by by. A flow canceled before keeps its first mark.
func (s *Store) CancelFlow(ctx context.Context, flow, by string) error {
	if s.flows == nil {
		return fmt.Errorf("cancel flow %s: bucket %s not found: the hosts predate canceling flows; upgrade them", flow, FlowsBucket)
	}
	b, _ := json.Marshal(CanceledFlow{By: by, At: time.Now()})
	if _, err := s.flows.Create(ctx, flow, b); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		if errors.Is(err, jetstream.ErrInvalidKey) {
			return fmt.Errorf("flow %q: %w (flow ids are letters, digits, - and _)", flow, ErrNotFound)
		}
		return fmt.Errorf("cancel flow %s: %w", flow, err)
	}
	return nil
}

// FlowCanceled says whether flow was canceled, and by whom.
func (s *Store) FlowCanceled(ctx context.Context, flow string) (*CanceledFlow, error) {
	if s.flows == nil {
		return nil, nil
	}
	e, err := s.flows.Get(ctx, flow)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read whether flow %s is canceled: %w", flow, err)
	}
	var c CanceledFlow
	if err := json.Unmarshal(e.Value(), &c); err != nil {
		return nil, fmt.Errorf("decode the cancel of flow %s: %w", flow, err)
	}
	return &c, nil
}
