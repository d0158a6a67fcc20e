// Package retry names the host's backoff schedules. Each retry loop picks one by purpose here
// instead of configuring a backoff of its own, so the host's timings read in one place and are
// built one way; cenkalti/backoff does the arithmetic.
package retry

import (
	"time"

	"github.com/cenkalti/backoff/v4"
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
	// GiveUpAfter is how long after the first attempt NextBackOff returns backoff.Stop.
	GiveUpAfter time.Duration
}

// New builds a fresh schedule of p. Like any ExponentialBackOff, it is for one goroutine.
func (p Policy) New() *backoff.ExponentialBackOff {
	m := p.Multiplier
	if m == 0 {
		m = backoff.DefaultMultiplier
	}
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(p.Initial),
		backoff.WithMaxInterval(p.Max),
		backoff.WithMultiplier(m),
		backoff.WithRandomizationFactor(p.Jitter),
		backoff.WithMaxElapsedTime(p.GiveUpAfter),
	)
}

// Within is p giving up after d (never when d is 0): for bounds that a caller's options set.
func (p Policy) Within(d time.Duration) Policy {
	p.GiveUpAfter = d
	return p
}

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

	// Store paces the calls to an object store that failed in a way a retry can fix, Within
	// the volume's RetryFor.
	Store = Policy{Initial: 50 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.5}
)
