// Package retry names the host's backoff schedules. Each retry loop picks one by purpose here
// instead of configuring a backoff of its own, so the host's timings read in one place and are
// built one way. A loop that retries one call runs it through Do (cenkalti/backoff's Retry); one
// that counts its attempts itself (a job's retries, a reconnection, a run slot's fetches) asks
// Wait(attempt), which depends on the attempt alone.
package retry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Policy is an exponential backoff schedule. The zero Multiplier is backoff's default (1.5);
// a zero Jitter is none, and a zero GiveUpAfter never gives up.
type Policy struct {
	Initial    time.Duration // the first wait
	Max        time.Duration // no wait is longer
	Multiplier float64       // each wait is the previous one times this
	// Jitter spreads each wait by ±Jitter of itself, so that parties that failed together do
	// not come back together.
	Jitter float64
	// GiveUpAfter is how long after the first attempt Do stops trying (0: never).
	GiveUpAfter time.Duration
}

func (p Policy) multiplier() float64 {
	if p.Multiplier == 0 {
		return backoff.DefaultMultiplier
	}
	return p.Multiplier
}

// New builds a fresh schedule of p for backoff.Retry. Like any ExponentialBackOff, it is for
// one goroutine. It does not give up by itself: Do applies GiveUpAfter.
func (p Policy) New() *backoff.ExponentialBackOff {
	return &backoff.ExponentialBackOff{
		InitialInterval:     p.Initial,
		MaxInterval:         p.Max,
		Multiplier:          p.multiplier(),
		RandomizationFactor: p.Jitter,
	}
}

// Delay is the wait after the given attempt (1 the first; below 1 counts as 1) before the
// next, without jitter: Initial times Multiplier to the attempt-1, at most Max. It is the
// arithmetic of backoff's ExponentialBackOff, as a function of the attempt.
func (p Policy) Delay(attempt int) time.Duration {
	d, m := p.Initial, p.multiplier()
	for i := 1; i < attempt; i++ {
		if float64(d) >= float64(p.Max)/m {
			return p.Max
		}
		d = time.Duration(float64(d) * m)
	}
	return min(d, p.Max)
}

// Wait is Delay(attempt) spread by ±Jitter.
func (p Policy) Wait(attempt int) time.Duration {
	d := p.Delay(attempt)
	if p.Jitter == 0 {
		return d
	}
	delta := p.Jitter * float64(d)
	return time.Duration(float64(d) - delta + rand.Float64()*2*delta)
}

// Within is p giving up after d (never when d is 0): for bounds that a caller's options set.
func (p Policy) Within(d time.Duration) Policy {
	p.GiveUpAfter = d
	return p
}

// Do runs op on p's schedule (backoff.Retry) until it succeeds, returns a backoff.Permanent
// error, ctx ends or GiveUpAfter has passed. opts add to p's (WithMaxTries, WithNotify). Like
// backoff.Retry, it returns ctx's cause when ctx ends, else op's last error (unwrapped from
// Permanent).
func Do[T any](ctx context.Context, p Policy, op backoff.Operation[T], opts ...backoff.RetryOption) (T, error) {
	// backoff.Retry's own default gives up after 15 minutes; p says when, if ever.
	all := append([]backoff.RetryOption{backoff.WithBackOff(p.New()), backoff.WithMaxElapsedTime(p.GiveUpAfter)}, opts...)
	// The try the caller's deadline cuts off fails with the deadline, which says nothing of why
	// the tries before it failed: keep the last of those, so the error names the cause
	// (connection refused, a wrong key) and not only that time ran out.
	var cause error
	v, err := backoff.Retry(ctx, func() (T, error) {
		v, err := op()
		if err != nil && !isContext(err) {
			cause = err
		}
		return v, err
	}, all...)
	if perm, ok := err.(*backoff.PermanentError); ok {
		err = perm.Err // backoff.Retry leaves it wrapped when the last try allowed was permanent
	}
	if err != nil && cause != nil && isContext(err) {
		err = fmt.Errorf("%w (the try before: %w)", err, cause)
	}
	return v, err
}

func isContext(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// Permanent marks err as one that no retry fixes: Do returns it at once (backoff.Permanent).
func Permanent(err error) error { return backoff.Permanent(err) }

// The schedules. Those with jitter keep backoff's default spread of ±50%.
var (
	// Connect paces the first connection to NATS: quick while the server is starting beside
	// the host, no faster than every 5 s during a long wait (Within the caller's MaxWait).
	Connect = Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.5}

	// Reconnect paces reconnection after a lost connection: up to a second, so a NATS restart
	// is picked up within about a second (runs waiting to ack and held outputs are on a clock)
	// and a long outage is not hammered.
	Reconnect = Policy{Initial: 50 * time.Millisecond, Max: time.Second, Jitter: 0.5}

	// Admin paces a stream's, bucket's or consumer's create or lookup while JetStream does not
	// answer (bus.Patient): a cluster electing its leaders answers within seconds.
	Admin = Policy{Initial: 250 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.5}

	// Fetch paces a run slot's fetches after a failed one.
	Fetch = Policy{Initial: 250 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.5}

	// Publish paces a held output while NATS does not confirm it: short waits, since a job's
	// end waits on it, until the caller's context ends.
	Publish = Policy{Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond, Jitter: 0.5}

	// Record paces the writes of one job record while NATS does not answer, doubling from
	// 250 ms; the caller's context bounds the whole.
	Record = Policy{Initial: 250 * time.Millisecond, Max: 8 * time.Second, Multiplier: 2}

	// FinalLine paces the attempts at a job log's final line: doubling from 100 ms, its few
	// tries last about as long as a line's ack wait.
	FinalLine = Policy{Initial: 100 * time.Millisecond, Max: 1600 * time.Millisecond, Multiplier: 2}

	// JobRetry is the schedule of a job's retries: 1 s, 2 s, 4 s … up to 5 minutes, ±20% so
	// that jobs failed together do not come back together. A job's retries: annotation and
	// MaxDeliver bound it, not time.
	JobRetry = Policy{Initial: time.Second, Max: 5 * time.Minute, Multiplier: 2, Jitter: 0.2}

	// Lease paces a wait for a volume's lease, besides the watch that wakes it when the holder
	// leaves: an entry that expires by age produces no watch event.
	Lease = Policy{Initial: 50 * time.Millisecond, Max: time.Second, Jitter: 0.5}

	// Load paces a caller's wait for the hosts to load a function it has just written (`host
	// invoke` right after `host new`): a host reloads within a second or so of the last write.
	Load = Policy{Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond, Jitter: 0.5}

	// Store paces the calls to an object store that failed in a way a retry can fix, Within
	// the volume's RetryFor.
	Store = Policy{Initial: 50 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.5}
)
