package mcp

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/trace"
)

// JobTools mints the MCP endpoints of jobs whose function declares tools: (runner.Tools): each
// offers exactly the functions the line names, whether they say tool: or not, to a bearer
// token made for that job alone, and makes each call a job of its own in the calling job's
// flow (its Flow-Id, the calling job as its parent, one hop more, and one Tool-Depth more, so
// that the host's bound on nested calls, --tool-depth, stops a chain that spans hosts; cycles
// among one directory's functions are refused at load). The record of such a call names the
// calling job as its caller. A call acts with the calling job's rights: a $secret: its function
// does not declare is refused before anything is published (see rights). Closing an endpoint
// (the job ended) refuses its token from then on and cancels its unfinished calls.
type JobTools struct {
	cfg Config
}

// NewJobTools serves jobs' tools from cfg's functions directory over cfg's NATS.
func NewJobTools(cfg Config) *JobTools {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	return &JobTools{cfg: cfg}
}

// jobSessionTimeout closes a job's idle MCP sessions: a job that is done with its tools, or
// that ended without saying so, leaves them behind.
const jobSessionTimeout = time.Minute

// Open is runner.Tools.Open.
func (jt *JobTools) Open(job jobtype.ToolsJob, names []string) (http.Handler, string, func()) {
	cfg := jt.cfg
	cfg.SessionTimeout = jobSessionTimeout
	cfg.Log = cfg.Log.With(zap.String("for_job", job.ID), zap.String("for_function", job.Function))
	s := New(cfg)
	s.only, s.pending = map[string]bool{}, map[string]bool{}
	for _, n := range names {
		s.only[n] = true
	}
	s.caller = "job " + job.ID + " (" + job.Function + ")"
	s.callerFn, s.declares = job.Function, job.Declares
	s.callerJob, s.starter = job.ID, job.Starter
	s.lineage = nats.Header{}
	s.lineage.Set(bus.HeaderFlowID, job.FlowID)
	s.lineage.Set(bus.HeaderParentJob, job.ID)
	s.lineage.Set(bus.HeaderHop, strconv.Itoa(job.Hop+1))
	s.lineage.Set(bus.HeaderToolDepth, strconv.Itoa(job.ToolDepth+1))
	// Its calls' jobs hang under the calling job's span.
	trace.SetHeaders(s.lineage, job.Trace, "")
	ended, end := context.WithCancel(context.Background())
	s.ended = ended
	endpoint := &jobEndpoint{s: s}
	var secret [32]byte
	rand.Read(secret[:]) // never fails on Linux
	token := hex.EncodeToString(secret[:])
	endpoint.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case ended.Err() != nil:
			http.Error(w, fmt.Sprintf("this token was made for job %s, which has ended", job.ID), http.StatusUnauthorized)
		case subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+token)) != 1:
			http.Error(w, "this endpoint needs the job's token: send Authorization: Bearer $HOST_MCP_TOKEN", http.StatusUnauthorized)
		default:
			s.ServeHTTP(w, r)
		}
	})
	return endpoint, token, func() {
		end()
		s.replies.close()
	}
}

// jobEndpoint is a job's MCP endpoint: its handler, and what it tells the runner of its calls
// (runner.UnstartedCalls).
type jobEndpoint struct {
	http.Handler
	s *Server
}

// Unstarted is runner.UnstartedCalls: the job's unanswered calls whose jobs have not started
// (queued, waiting for a retry, or canceled before they ran), as "<id> (<function>)". A job that
// timed out waiting on one of them would wait the same way if it were retried. A call the job
// gave up on itself (its own cancellation) before its job ran counts too: the endpoint cannot
// tell that from the jail's end cutting the call off, and the job did wait on it.
func (e *jobEndpoint) Unstarted(ctx context.Context) []string {
	s := e.s
	s.mu.Lock()
	ids := sortedKeys(s.pending)
	s.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	c, err := s.c.Get(ctx)
	if err != nil {
		s.log.Warn("cannot read whether the job's tool calls had started: the job store is not reachable", zap.Error(err))
		return nil
	}
	var out []string
	for _, id := range ids {
		rec, err := c.Jobs.Get(ctx, id)
		switch {
		case errors.Is(err, jobs.ErrNotFound):
			out = append(out, id) // published, its queued record not written (yet)
		case err != nil:
			s.log.Warn("cannot read whether a tool call had started", zap.String("job_id", id), zap.Error(err))
		case rec.Status == jobtype.Queued || rec.Status == jobtype.Retrying || rec.Started.IsZero():
			out = append(out, id+" ("+rec.Function+")")
		}
	}
	return out
}
