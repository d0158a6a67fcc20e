// Package jobtype is the job contract: what a job is, how a run of it ends, the kinds of
// failure the engine tells apart, and the statuses a job's record moves through, with the
// only moves allowed between them. It imports nothing of the host's, so that the engine
// (package host), the store (package jobs), the runner and their tests share one vocabulary
// without compiling one another, the way River keeps its primitives in rivertype and Nomad its
// task contract in plugins/drivers.
package jobtype

import (
	"context"
	"encoding/json"
	"time"
)

// Job is one attempt at running a function: what the runner is handed by the engine. The
// function itself (its code version and annotations) is handed beside it.
type Job struct {
	ID      string
	FlowID  string
	Attempt int // 1 for the first delivery
	// Hop is the steps before this one in its flow: a tool call the job makes (tools:) is one
	// more, so that agents calling each other meet the hop guard.
	Hop int
	// ToolDepth is how deeply the job is nested as a tool call (tools:): 0 when it is not one,
	// 1 for a job's call, and so on. Its own calls are one deeper.
	ToolDepth int
	// Starter is the user name of the person who started the job's flow ("" when none): the
	// job's tool calls are steps of that flow and carry it on.
	Starter string
	// Trace is the W3C traceparent of the job's span, its TRACEPARENT; "" when tracing is off.
	Trace string
	// Payload is the trigger's body as received: the engine does not parse it, the runner does.
	Payload []byte
	// Log receives each output line as it comes; nil discards them.
	Log LineFunc
}

// LineFunc receives one output line of a job, without its newline; stream is "stdout" or
// "stderr".
type LineFunc func(stream string, line []byte)

// Outcome is how a run ended. A run that did not succeed says why in Err, and the error's
// kind (IsTerminal, IsUnavailable, IsCanceled) says what the engine does next.
type Outcome struct {
	Result     json.RawMessage // set on success
	Err        error
	ExitCode   int // -1 when no process ran or it was killed
	StderrTail string
	StartDelay time.Duration // jail set-up, up to the process being started
	// Served says how a jailed job got its jail: "fork" (of its function's template), "warm"
	// (a jail started ahead of it), "reuse" (a jail kept for many messages, reuse:) or "cold"
	// (a jail started for it); "" for an unjailed job.
	Served     string
	Duration   time.Duration
	LogDropped int64 // log bytes over the budget
	// LogTruncated is the log bytes published before the budget ran out; 0 when it did not.
	LogTruncated int64
	// LogEnd is the line that must end the job's log when its output was cut (the truncation
	// notice); nil otherwise. The runner does not send it through Job.Log: the engine puts it
	// after every other line, those it writes itself included.
	LogEnd  []byte
	Volumes []Volume
	// Staged are the volumes a staged step (approve: ... stage) changed, each stored as a
	// version of its own that the approval's decision promotes or discards.
	Staged []StagedVolume
}

// StagedVolume is one volume a staged step (approve: ... stage) changed: its commit stored as a
// version of its own, written where a committed version's manifest would be, that approve makes
// the head by compare-and-set from Base and that reject or a timeout discards.
type StagedVolume struct {
	Volume   string `json:"volume"`
	Base     uint64 `json:"base"`     // the head the step checked out; 0: the volume was new
	Version  uint64 `json:"version"`  // the version approve makes current
	Manifest string `json:"manifest"` // the staged manifest's sha256, part of its key
	// What changed against Base, from the manifests alone (no content read): the counts are
	// whole, the path lists hold at most MaxStagedPaths each, so an announcement stays small.
	Added    []string `json:"added,omitempty"`
	Removed  []string `json:"removed,omitempty"`
	Changed  []string `json:"changed,omitempty"`
	NAdded   int      `json:"n_added"`
	NRemoved int      `json:"n_removed"`
	NChanged int      `json:"n_changed"`
	Bytes    int64    `json:"bytes"` // the staged version's total size
}

// MaxStagedPaths bounds each path list of a StagedVolume.
const MaxStagedPaths = 50

// Volume is what a job did with one of its volumes; a job's record keeps one per volume.
type Volume struct {
	Name      string `json:"name"`
	Path      string `json:"path"`
	Version   uint64 `json:"version"`             // checked out
	Committed uint64 `json:"committed,omitempty"` // written back, when the run succeeded
	Staged    uint64 `json:"staged,omitempty"`    // stored for approval (approve: ... stage), not yet current
	Files     int    `json:"files"`
	FilesIn   int    `json:"files_in"`  // fetched from the store (not in the local cache)
	BytesIn   int64  `json:"bytes_in"`  //
	FilesOut  int    `json:"files_out"` // uploaded
	BytesOut  int64  `json:"bytes_out"` //
}

// Handle is a started run, as a driver hands it back (Nomad's task handle): the engine waits
// for its outcome, may stop it, and destroys it once it has settled the job. The run's outcome
// can come before what it held is gone (a warm runtime answers on its end line while its jail
// is still being torn down); Destroy is what waits for that, so that whoever bounds how many
// jobs run at once holds the job's slot until then.
type Handle interface {
	// Wait returns a channel that delivers the run's outcome once, then is closed; when ctx
	// ends first it is closed without one. Waiting does not affect the run.
	Wait(ctx context.Context) <-chan *Outcome
	// Stop kills the run for cause; its outcome then reports it canceled (IsCanceled).
	Stop(cause error)
	// Destroy stops the run if it is still going and returns once everything it held (its
	// processes, its jail, its job directory) is released. It may be called more than once.
	Destroy()
}

// ToolsJob is the job a tool endpoint (`tools:`) is minted for: what the runner tells the
// endpoint's maker (*mcp.JobTools) about the job that will call it.
type ToolsJob struct {
	ID, FlowID, Function string
	Hop                  int
	// ToolDepth is how deeply the job itself is nested as a tool call (0: it is not one); its
	// calls are one deeper.
	ToolDepth int
	// Starter is the user name of the person who started the job's flow: its calls carry it on.
	Starter string
	// Trace is the job's traceparent, which its calls carry on ("" when tracing is off).
	Trace string
	// Declares says which secrets the job's function declares (env:, secrets:): a $secret:
	// its calls pass must be one of them, since a tool call acts with its caller's rights.
	Declares func(name string) bool
}
