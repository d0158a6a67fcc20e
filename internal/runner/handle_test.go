package runner

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/host/internal/jobtype"
)

// A job without volumes is answered on its runtime's end lines, while what is left of its jail
// still runs; Destroy returns once that is gone. Cold and warm alike: a warm jail is a handle
// started ahead of its job.
func TestHandleAnswersBeforeTeardown(t *testing.T) {
	r, dir := newJailRunner(t, WarmConfig{PerFunction: 1})
	for _, warm := range []bool{false, true} {
		t.Run(map[bool]string{false: "cold", true: "warm"}[warm], func(t *testing.T) {
			tok := fmt.Sprint(2_000_000 + rand.IntN(8_000_000))
			// The end lines as the shim prints them, then a process that keeps the jail up for
			// weeks: an outcome within the minute came before the jail's end.
			src := "echo '\"ok\"'\nprintf '\\036host-end 0\\n'; printf '\\036host-end 0\\n' >&2\nexec sleep " + tok + "\n"
			name := fmt.Sprintf("late%v", warm)
			fn, code := bashFunction(t, dir, name, src, 0)
			n := 0
			if warm {
				n = 1
			}
			fn.Spec.Warm = &n
			r.Warm(fn, code)
			if warm {
				waitReady(t, r, name)
			}
			h := r.Start(context.Background(), fn, code, &jobtype.Job{ID: "job-" + name, Payload: []byte(`{}`)})
			var out *jobtype.Outcome
			select {
			case out = <-h.Wait(context.Background()):
			case <-time.After(time.Minute):
				t.Fatal("no outcome within a minute")
			}
			if out.Err != nil || string(out.Result) != `"ok"` {
				t.Fatalf("outcome %v, result %s, want \"ok\" (stderr %s)", out.Err, out.Result, out.StderrTail)
			}
			if got := counterValue(r.warm.m.hits.WithLabelValues(name)); got != float64(n) {
				t.Fatalf("%v warm hits, want %d", got, n)
			}
			destroyed := make(chan struct{})
			go func() { h.Destroy(); close(destroyed) }()
			select {
			case <-destroyed:
			case <-time.After(time.Minute):
				t.Fatal("Destroy did not return within a minute")
			}
			if pids := sleeps(t, tok); len(pids) > 0 {
				t.Fatalf("sleep %s still runs after Destroy: %v", tok, pids)
			}
			h.Destroy() // again: at once
		})
	}
}

// sleeps lists the live processes running `sleep tok`.
func sleeps(t *testing.T, tok string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || string(cmdline) != "sleep\x00"+tok+"\x00" {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil && !strings.Contains(string(stat), ") Z ") {
			pids = append(pids, e.Name())
		}
	}
	return pids
}
