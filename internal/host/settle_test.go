package host

import (
	"testing"
	"time"

	"github.com/agenthost/host/internal/jobtype"
)

// The retry schedule: 1s, 2s, 4s … capped at 5 minutes, each within ±20% jitter.
func TestEngineRetryDelay(t *testing.T) {
	for _, c := range []struct {
		attempt int
		base    time.Duration
	}{
		{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {9, 256 * time.Second},
		{10, 5 * time.Minute}, {50, 5 * time.Minute}, {200, 5 * time.Minute},
	} {
		lo, hi := time.Duration(float64(c.base)*0.8), time.Duration(float64(c.base)*1.2)
		for range 50 {
			if d := retryDelay(c.attempt); d < lo || d > hi {
				t.Fatalf("retryDelay(%d) = %s, want within [%s, %s]", c.attempt, d, lo, hi)
			}
		}
	}
}

// Every verdict has an ending, dropped (the last) included: settle never meets one it does not
// know, and each is counted and logged, and records a status the store allows from where it
// is settled.
func TestEngineEveryVerdictHasAnEnding(t *testing.T) {
	for v := range verdict(len(endings)) {
		e := endings[v]
		if e.metric == "" || e.log == "" {
			t.Errorf("verdict %d has no ending: %+v", v, e)
		}
		// waiting is settled by another message: the decision, or its timer.
		if e.status != "" && !e.status.Final() && e.status != jobtype.Waiting && e.settle != nak && e.settle != nakDelay {
			t.Errorf("verdict %d records %q, which is not final, but does not hand the message back", v, e.status)
		}
		if e.status.Final() && (e.settle == nak || e.settle == nakDelay) {
			t.Errorf("verdict %d records the final %q but hands the message back to run again", v, e.status)
		}
	}
}
