package hosttest

import (
	"context"
	"sync"

	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/jobtype"
)

// Runs is a Runner for NewEngine, in place of the jail: a function's run is what its behaviour
// (On) returns, and one without a behaviour succeeds at once with "ok". It counts the runs of
// each job, so that a test can tell a job answered from its record from one run again.
type Runs struct {
	mu    sync.Mutex
	count map[string]int
	behav map[string]func(ctx context.Context, j *jobtype.Job) *jobtype.Outcome
}

// NewRuns is a Runs with no behaviours yet.
func NewRuns() *Runs {
	return &Runs{count: map[string]int{}, behav: map[string]func(context.Context, *jobtype.Job) *jobtype.Outcome{}}
}

// On sets how function runs; set them all before the host starts.
func (r *Runs) On(function string, b func(ctx context.Context, j *jobtype.Job) *jobtype.Outcome) *Runs {
	r.behav[function] = b
	return r
}

func (r *Runs) Start(ctx context.Context, fn *functions.Function, _ string, j *jobtype.Job) jobtype.Handle {
	r.mu.Lock()
	r.count[j.ID]++
	b := r.behav[fn.Name]
	r.mu.Unlock()
	return Started(ctx, func(ctx context.Context) *jobtype.Outcome {
		if b == nil {
			return &jobtype.Outcome{Result: []byte(`"ok"`)}
		}
		return b(ctx, j)
	}, nil)
}

// Count is how many times job id was run.
func (r *Runs) Count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count[id]
}
