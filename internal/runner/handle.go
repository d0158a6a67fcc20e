package runner

import (
	"context"
	"errors"
	"sync"

	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/jobtype"
)

// Start starts one job of fn, whose version is the snapshot in codeDir, and returns its
// handle (see jobtype.Handle). The run is bounded by ctx: ending it stops the run, as Stop
// does. Every failure, a payload that does not fit main's types included, is in the outcome.
//
// The outcome comes once every process of the job is gone, or, for a job without volumes, as
// soon as its runtime said it is done (its end lines), while its jail is still torn down.
// Destroy is what releases the job's jail, egress socket and directory, and returns once its
// jail is gone.
func (r *Runner) Start(ctx context.Context, fn *functions.Function, codeDir string, job *jobtype.Job) jobtype.Handle {
	ctx, stop := context.WithCancelCause(ctx)
	h := &handle{stop: stop, ended: make(chan struct{})}
	go func() {
		h.out, h.held = r.runJob(ctx, &task{Job: job, Fn: fn, CodeDir: codeDir})
		close(h.ended)
	}()
	return h
}

// Run runs one job to its end, its jail's teardown included, and says how it ended and the
// moments it passed.
func (r *Runner) Run(ctx context.Context, fn *functions.Function, codeDir string, job *jobtype.Job) (*jobtype.Outcome, Marks) {
	h := r.Start(ctx, fn, codeDir, job).(*handle)
	<-h.ended
	h.Destroy()
	return &h.out.Outcome, h.out.marks
}

// handle is a job started by Start.
type handle struct {
	stop  context.CancelCauseFunc
	ended chan struct{} // closed once out is set
	out   *outcome
	// held is what the run holds until Destroy (its jail, job directory, egress socket); nil
	// when it never laid anything out.
	held      *prepared
	destroyed sync.Once
}

func (h *handle) Wait(ctx context.Context) <-chan *jobtype.Outcome {
	c := make(chan *jobtype.Outcome, 1)
	select {
	case <-h.ended:
		c <- &h.out.Outcome
		close(c)
		return c
	default:
	}
	go func() {
		defer close(c)
		select {
		case <-h.ended:
			c <- &h.out.Outcome
		case <-ctx.Done():
		}
	}()
	return c
}

func (h *handle) Stop(cause error) { h.stop(cause) }

// errDestroyed is why a run still going when its handle is destroyed was stopped.
var errDestroyed = errors.New("the run's handle was destroyed before it ended")

func (h *handle) Destroy() {
	h.destroyed.Do(func() {
		select {
		case <-h.ended:
		default:
			h.stop(errDestroyed)
			<-h.ended
		}
		if h.held != nil {
			h.held.release()
		}
		h.stop(nil) // releases the run's context
	})
}
