// Package runner runs one job of a function: it checks the payload, lays out the job's
// directories, builds the runtime's command, runs it in the jail (or, for functions without
// `sandbox`, directly), streams its output and reads its result.
package runner

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/egress"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/jailfs"
	"github.com/agenthost/host/internal/jailinit/initbin"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/objstore"
	"github.com/agenthost/host/internal/packages"
	"github.com/agenthost/host/internal/runtimes"
	"github.com/agenthost/host/internal/sandbox"
	"github.com/agenthost/host/internal/secrets"
)

// Paths inside the jail. /job is the contract's; the rest are the host's own and read-only
// except the io directory, where the shim writes the result.
const (
	jailFunctionDir = "/host/fn"
	jailShimDir     = "/host/shims"
	jailIODir       = "/host/io"
)

// Defaults of Config, exported for the flags that set them.
const (
	// DefaultTimeout is the timeout of functions without a timeout: annotation.
	DefaultTimeout = 15 * time.Minute
	// DefaultMaxLogBytes bounds the output published per job.
	DefaultMaxLogBytes = 10 << 20
)

// Config is what the runner needs from the host.
type Config struct {
	// RunDir holds one scratch directory per running job; it is emptied after each run.
	RunDir string
	// ShimDir is where the runtime shims were written (runtimes.WriteShims).
	ShimDir string
	// Jail runs sandbox functions; nil when no jail tool is installed, in which case JailErr
	// says why and sandbox functions fail with it.
	Jail    Jail
	JailErr error
	// Limits are the host's limits for jailed runs; a function's memory: overrides Memory.
	Limits sandbox.Limits
	// JobDisk bounds a jailed job's directory, /job with its volumes, in bytes: it is a tmpfs
	// of that size (jailfs.Tree), and a function's disk: overrides it. 0 means DefaultJobDisk,
	// a negative value no bound (then /job is on the --data disk). A host that is not root
	// cannot mount one: it runs without, and says so at start.
	JobDisk int64
	// Direct runs functions without `sandbox`.
	Direct sandbox.Jail
	// Workspace fills $workspace.
	Workspace string
	// DefaultTimeout applies to functions without timeout:; the package's DefaultTimeout when zero.
	DefaultTimeout time.Duration
	// MaxResultBytes is the largest result that can be published (the NATS max payload less
	// room for headers).
	MaxResultBytes int
	// MaxLogBytes bounds the log bytes published per job; the rest is dropped and counted.
	// DefaultMaxLogBytes when zero.
	MaxLogBytes int64
	// Secrets resolves $secret: arguments and env: lines; nil means none are configured.
	Secrets Secrets
	// Packages installs what functions import; nil means functions that need packages fail.
	Packages Packages
	// Volumes stores functions' volumes; nil means functions with volumes fail.
	Volumes Volumes
	// Egress is the proxy that `network: proxy` jobs reach the outside through; nil means
	// such jobs get no network at all.
	Egress Egress
	// Tools serves a job the MCP tools its function declares (tools:), through its proxy;
	// nil means a `tools:` line gets no endpoint (the job's log says so).
	Tools Tools
	// JailInit is the jail init (package jailinit), installed where the jail user can run it:
	// the first process of a `network: proxy` jail, which forwards the job's proxy connections
	// to the host. nil means such jobs cannot run.
	JailInit *initbin.Installed
	// ForwardInJail keeps the jail init as the way out of `network: proxy` jobs even on a
	// jail that lets the host hold the job's proxy address itself (see egressFromHost): for
	// hosts that should never enter a jail's network namespace, and for that path's tests.
	ForwardInJail bool
	// Warm configures the jails kept started ahead of sandboxed functions' jobs (see Warm).
	Warm WarmConfig
	// Fork serves the jobs of sandboxed Python functions by forking each from a template jail
	// of its function version (see fork.go) instead of a warm or cold jail of its own.
	Fork bool
	// Log receives what happens outside any job (warm jails that die); nil discards it.
	Log *zap.Logger
	// Registerer takes the runner's metrics; nil keeps them unregistered.
	Registerer prometheus.Registerer
}

// Tools mints a job's MCP endpoint for the functions its `tools:` line names. *mcp.JobTools
// is one.
type Tools interface {
	// Open returns the endpoint's handler for job, which lists and calls exactly names, each
	// call a job of its own in job's flow; the token it asks for (Authorization: Bearer); and
	// close, after which the token is refused and unfinished calls are canceled.
	Open(job jobtype.ToolsJob, names []string) (handler http.Handler, token string, close func())
}

// UnstartedCalls is what a job's tool endpoint (Tools.Open's handler) may also be: it tells
// which of the job's tool calls were still waiting to start. A job that timed out waiting on
// one would wait the same way if retried (the tool's run slots are all taken), so its timeout
// is final.
type UnstartedCalls interface {
	Unstarted(ctx context.Context) []string
}

// Egress serves one job's proxy: on a Unix socket it creates (Listen), or on a listener of the
// caller's (Start). *egress.Proxy is one.
type Egress interface {
	Listen(ctx context.Context, path string, uid, gid int, policy egress.Policy) (io.Closer, error)
	Start(ctx context.Context, l net.Listener, policy egress.Policy) (io.Closer, error)
	// CA is what the proxy terminates TLS with, for sealed secrets and egress: rules; nil when
	// it cannot.
	CA() *egress.CA
}

// Volumes checks volumes out into a job and commits them back. *objstore.Volumes is one.
type Volumes interface {
	// MountAt checks volume name out at rel beneath root, a job's tree, following no link.
	MountAt(ctx context.Context, name string, root *jailfs.Dir, rel, holder string) (*objstore.Mounted, error)
}

// Jail is a jail that runs as a user of its own, who must own what the job writes.
type Jail interface {
	sandbox.Jail
	Owner() (uid, gid int)
}

// Secrets resolves secret references at run time. *secrets.Store is one.
type Secrets interface {
	// ResolveArgs refuses, before reading anything, a name for which declared is false.
	ResolveArgs(ctx context.Context, args map[string]any, declared func(name string) bool) (map[string]any, *secrets.Redactor, error)
	Resolve(ctx context.Context, name string) (string, *secrets.Redactor, error)
	// ResolveField is Resolve for a reference that may end with a field: "<name>.<field>".
	ResolveField(ctx context.Context, ref string) (string, *secrets.Redactor, error)
}

// Packages installs a function's packages once and says where they are. *packages.Installer is one.
type Packages interface {
	Ensure(ctx context.Context, codeDir, entry string, logf func(format string, args ...any)) (*packages.Installed, error)
}

// Runner runs jobs.
type Runner struct {
	cfg   Config
	warm  *warmPools
	forks *forkPools
	reuse *reusePools // jails kept for many messages (reuse:)
	// kinds are the ways a job gets its jail, in the order they are chosen (see jailkind.go).
	kinds []jailKind
	// installed remembers, per function version (its snapshot directory), what Ensure found,
	// so that a version's sources are scanned for imports once, not on every run.
	installed sync.Map // codeDir → *packages.Installed (nil: needs none)
	// unbounded says why this host cannot mount a bounded job tree (jailfs.CanMount); nil when
	// it can.
	unbounded error
}

// New checks the configuration and prepares the run directory.
func New(cfg Config) (*Runner, error) {
	if cfg.Direct == nil {
		cfg.Direct = sandbox.NewDirect()
	}
	if cfg.DefaultTimeout <= 0 {
		cfg.DefaultTimeout = DefaultTimeout
	}
	if cfg.MaxLogBytes <= 0 {
		cfg.MaxLogBytes = DefaultMaxLogBytes
	}
	if cfg.MaxResultBytes <= 0 {
		cfg.MaxResultBytes = 1 << 20
	}
	if cfg.JobDisk == 0 {
		cfg.JobDisk = DefaultJobDisk
	}
	if err := os.MkdirAll(cfg.RunDir, 0o711); err != nil {
		return nil, fmt.Errorf("create run directory %s: %w", cfg.RunDir, err)
	}
	// The jail user must be able to traverse to its bind sources, but not list other jobs.
	if err := os.Chmod(cfg.RunDir, 0o711); err != nil {
		return nil, fmt.Errorf("chmod run directory %s: %w", cfg.RunDir, err)
	}
	// Jobs of a host that was killed left their scratch directories, arguments with resolved
	// secrets among them; nothing in there belongs to a living job at start.
	if err := clearRunDir(cfg.RunDir); err != nil {
		return nil, err
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	r := &Runner{cfg: cfg}
	if cfg.Jail != nil {
		if err := jailfs.CanMount(cfg.RunDir); err != nil {
			r.unbounded = err
			if cfg.JobDisk > 0 {
				cfg.Log.Warn("jailed jobs' directories are not bounded: a job can fill the --data disk, and a function with a `disk:` annotation fails; run the host as root with CAP_SYS_ADMIN, or pass --job-disk 0 to say so on purpose",
					zap.Int64("job_disk", cfg.JobDisk), zap.Error(err))
			}
		}
	}
	r.warm = newWarmPools(r)
	r.forks = newForkPools(r)
	r.reuse = newReusePools(r)
	r.kinds = r.jailKinds()
	return r, nil
}

// task is one job as the runner runs it: the engine's job and the function version it runs.
type task struct {
	*jobtype.Job
	Fn *functions.Function
	// CodeDir is the function's snapshot (functions.Function.Snapshot).
	CodeDir string
	// tools is the job's MCP endpoint (tools:), served by its proxy as http://host.mcp/.
	tools http.Handler
	// sealed are the job's sealed secrets (env: NAME=$sealed:...), for its egress policy.
	sealed []egress.Sealed
	// placeholders are those its warm jail started with, by variable; nil for a cold job.
	placeholders map[string]string
}

// sayOmitted tells the job's log which ARG_ variables its script will find unset, and why: a
// script reading one would otherwise see an empty value and no reason.
func sayOmitted(job *task, cmd *runtimes.Command) {
	for _, o := range cmd.Omitted {
		job.say("%s", o.Reason())
	}
}

// say puts a line of the host's own in the job's log.
func (j *task) say(format string, args ...any) {
	if j.Log != nil {
		j.Log("stderr", fmt.Appendf(nil, "[host] "+format, args...))
	}
}

// outcome is a run's end as the runner knows it: the engine's part, and the moments it passed
// (for `host bench`).
type outcome struct {
	jobtype.Outcome
	marks Marks
}

func failedRun(err error) *outcome {
	return &outcome{Outcome: jobtype.Outcome{ExitCode: -1, Err: err}}
}

func terminal(format string, args ...any) error {
	return jobtype.Terminal(fmt.Errorf(format, args...))
}
