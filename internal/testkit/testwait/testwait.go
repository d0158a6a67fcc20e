// Package testwait waits, in tests, for what has no event to wait on, and says what it last saw
// when the wait runs out: a bare "timed out" leaves a failure on a loaded CI machine unexplained.
package testwait

import (
	"errors"
	"testing"
	"time"
)

// Every is how often a wait looks again: often enough that a test does not wait long past the
// moment the condition holds, seldom enough not to compete with what it waits for.
const Every = 25 * time.Millisecond

// Within is the usual bound of a wait: a safety net on a loaded machine, not the expected time,
// since a wait ends as soon as its condition holds.
const Within = 2 * time.Minute

// errNotYet is what a condition without a state of its own last showed.
var errNotYet = errors.New("the condition did not hold")

// Poll calls check until it returns nil or within has passed, and returns check's last error:
// nil once it held, else what it last saw.
func Poll(within time.Duration, check func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := check()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(Every)
	}
}

// Cond turns a condition with nothing to report into a check for Poll and For.
func Cond(cond func() bool) func() error {
	return func() error {
		if cond() {
			return nil
		}
		return errNotYet
	}
}

// For waits until check returns nil, failing the test with what it waited for and check's
// last error if that has not happened within within.
func For(tb testing.TB, what string, within time.Duration, check func() error) {
	tb.Helper()
	if err := Poll(within, check); err != nil {
		tb.Fatalf("waiting for %s: not within %s; last seen: %v", what, within, err)
	}
}
