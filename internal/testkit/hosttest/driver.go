package hosttest

import (
	"context"

	"github.com/agenthost/host/internal/jobtype"
)

// Started runs run in a goroutine of its own, as a driver runs a job, and returns its handle:
// run's context ends on Stop, Destroy or when ctx ends; Destroy waits for run to return and,
// when teardown is not nil, for teardown to be closed (a jail still being torn down after its
// answer). It is what fake runners hand back to the engine.
func Started(ctx context.Context, run func(ctx context.Context) *jobtype.Outcome, teardown <-chan struct{}) jobtype.Handle {
	ctx, stop := context.WithCancelCause(ctx)
	h := &handle{stop: stop, ended: make(chan struct{}), teardown: teardown}
	go func() {
		h.out = run(ctx)
		close(h.ended)
	}()
	return h
}

type handle struct {
	stop     context.CancelCauseFunc
	ended    chan struct{}
	out      *jobtype.Outcome
	teardown <-chan struct{}
}

func (h *handle) Wait(ctx context.Context) <-chan *jobtype.Outcome {
	c := make(chan *jobtype.Outcome, 1)
	go func() {
		defer close(c)
		select {
		case <-h.ended:
			c <- h.out
		case <-ctx.Done():
		}
	}()
	return c
}

func (h *handle) Stop(cause error) { h.stop(cause) }

func (h *handle) Destroy() {
	h.stop(context.Canceled)
	<-h.ended
	if h.teardown != nil {
		<-h.teardown
	}
}
