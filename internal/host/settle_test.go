package host

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/jobs"
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

// Every verdict has an ending: settle never meets one it does not know, and each is counted
// and logged under a name of its own.
func TestEngineEveryVerdictHasAnEnding(t *testing.T) {
	for v := succeeded; v <= canceled; v++ {
		e := endings[v]
		if e.metric == "" || e.log == "" {
			t.Errorf("verdict %d has no ending: %+v", v, e)
		}
		if e.status != "" && !e.status.Final() && e.settle != nak && e.settle != nakDelay {
			t.Errorf("verdict %d records %q, which is not final, but does not hand the message back", v, e.status)
		}
		if e.status.Final() && (e.settle == nak || e.settle == nakDelay) {
			t.Errorf("verdict %d records the final %q but hands the message back to run again", v, e.status)
		}
	}
}

// An illegal move is refused: logged, counted, and the status is left as it was.
func TestEngineTransitionRefusesIllegalMoves(t *testing.T) {
	h := &Host{log: zap.NewNop(), m: newMetrics(prometheus.NewRegistry())}
	j := &job{s: &served{fn: &functions.Function{Name: "f"}}, rec: &jobs.Record{ID: "j", Status: jobtype.Succeeded}}
	if err := h.transition(j, jobtype.Running); err == nil || j.rec.Status != jobtype.Succeeded {
		t.Fatalf("succeeded → running allowed: %v, status %s", err, j.rec.Status)
	}
	if n := testutil.ToFloat64(h.m.settleErrors.WithLabelValues("f", "transition")); n != 1 {
		t.Fatalf("illegal transitions counted: %v", n)
	}
	j.rec.Status = jobtype.Queued
	for _, to := range []jobtype.Status{jobtype.Running, jobtype.Canceled} {
		if err := h.transition(j, to); err != nil {
			t.Fatalf("legal move to %s refused: %v", to, err)
		}
	}
}
