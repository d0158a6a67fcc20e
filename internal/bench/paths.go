package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/agenthost/host/internal/annot"
)

// The paths measurements (issue 45): a message served by a fresh jail (the default: one warm
// jail per message) and by a kept one (`reuse: <n>`), side by side with the floors, at 2 and
// 8 callers, with the CPU a call costs.

// reuseRuns is the n of the `reuse:` functions: enough that a jail's start is spread thin.
const reuseRuns = 100

// pathFunctions are the functions of the paths host; the `reuse:` ones only when this build
// knows the annotation (see reuseSkipped).
func pathFunctions(reuse bool) map[string]string {
	fibo := `
def fibo(n):
    return n if n < 2 else fibo(n - 1) + fibo(n - 2)

def main():
    return fibo(10)
`
	fns := map[string]string{
		"noop.sh": "# sandbox\ntrue\n",
		"fibo.py": "# sandbox\n" + fibo,
	}
	if reuse {
		r := fmt.Sprintf("# reuse: %d\n", reuseRuns)
		fns["reuse-noop.sh"] = "# sandbox\n" + r + "true\n"
		fns["reuse-fibo.py"] = "# sandbox\n" + r + fibo
	}
	return fns
}

// reuseSkipped says why the `reuse:` rows are left out, or "" when they are measured.
func reuseSkipped() string {
	if annot.Known("reuse") {
		return ""
	}
	return "this build does not know the reuse: annotation (its parser would ignore it, and the function would run fresh)"
}

// PathsResult is one run of the paths measurements; Rows are in the order of pathRows.
type PathsResult struct {
	N      int
	Floor  ForkStats // plain bwrap, every namespace, bash -c true
	Python ForkStats // the same jail running python3 -c pass
	// Durable is a minimal durable call (store, fetch, one key-value write, reply, ack).
	Durable    ForkStats
	FreshNoop  ForkStats // agent.call of a bash no-op, a fresh (warm) jail per message
	FreshFibo  ForkStats // of Python fibo(10), a fresh (warm) jail per message
	ReuseNoop  ForkStats // of a bash no-op with `reuse: 100`
	ReuseFibo  ForkStats // of Python fibo(10) with `reuse: 100`
	ReuseSkip  string    // why the reuse rows were not measured, or ""
	OwnSkip    string    // why the benchmark's own CPU time was not measured, or ""
	reuseTaken bool
}

// RunPaths measures the fresh and the reused path against the floors; n is the runs per
// measurement.
func RunPaths(ctx context.Context, n int, progress io.Writer) (PathsResult, error) {
	res := PathsResult{N: n, ReuseSkip: reuseSkipped()}
	res.reuseTaken = res.ReuseSkip == ""
	if g, err := joinCPUGroup(); err != nil {
		res.OwnSkip = err.Error()
		fmt.Fprintf(progress, "paths: the benchmark's own CPU time is not measured: %v\n", err)
	} else {
		benchGroup = g
		defer func() { benchGroup = nil; g.leave() }()
	}
	dir, fnDir, err := functionsDir("host-bench-paths-", pathFunctions(res.reuseTaken))
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	h, err := startHost(ctx, dir, "paths", fnDir, 0, ForkCallers[len(ForkCallers)-1])
	if err != nil {
		return res, err
	}
	defer h.close()
	durable, err := startDurableCall(ctx, h.client.ConnectedUrl())
	if err != nil {
		return res, err
	}
	defer durable.close()
	all := []named{
		{"bwrap floor", floor, nil},
		{"jailed python3 -c pass", func() error { return runPlain(plainJail("python3", "-c", "pass")) }, nil},
		{"durable JetStream call", func() error { return durable.call(ctx) }, nil},
	}
	for _, f := range []struct{ row, fn string }{{"fresh bash no-op", "noop"}, {"fresh fibo.py", "fibo"}} {
		call, err := caller(ctx, h.client, f.fn)
		if err != nil {
			return res, err
		}
		all = append(all, named{f.row, call, h.warmRefilled(f.fn)})
	}
	if res.reuseTaken {
		for _, f := range []struct{ row, fn string }{{"reuse: bash no-op", "reuse-noop"}, {"reuse: fibo.py", "reuse-fibo"}} {
			call, err := caller(ctx, h.client, f.fn)
			if err != nil {
				return res, err
			}
			all = append(all, named{f.row, call, nil})
		}
	} else {
		fmt.Fprintf(progress, "paths: no reuse: rows: %s\n", res.ReuseSkip)
	}
	fmt.Fprintf(progress, "paths: %d runs of each, in turns: the floors (bwrap, a jailed python3 -c pass, a durable JetStream call), a bash no-op and a Python fibo(10) in a fresh jail per message, and with reuse: %d; then rates at %v callers…\n", n, reuseRuns, ForkCallers)
	stats, err := forkStats(ctx, n, all)
	if err != nil {
		return res, err
	}
	res.Floor, res.Python, res.Durable, res.FreshNoop, res.FreshFibo = stats[0], stats[1], stats[2], stats[3], stats[4]
	if res.reuseTaken {
		res.ReuseNoop, res.ReuseFibo = stats[5], stats[6]
	}
	return res, nil
}

// ReportPaths prints the paths side by side with the floors, and the targets.
func ReportPaths(w io.Writer, r PathsResult) {
	fmt.Fprintf(w, "\na fresh jail per message against reuse: %d, %d runs of each (cpu: the machine's, all %d cores, whatever else runs on it; own: the benchmark's processes alone, the host, its NATS server and every jail, from a cgroup of its own):\n", reuseRuns, r.N, runtime.NumCPU())
	if r.OwnSkip != "" {
		fmt.Fprintf(w, "own cpu not measured: %s\n", r.OwnSkip)
	}
	fmt.Fprintf(w, "%-24s %9s %9s", "measurement", "p50", "p99")
	for _, c := range ForkCallers {
		fmt.Fprintf(w, " %11s %8s", fmt.Sprintf("rate @%d", c), "/floor")
	}
	for _, c := range ForkCallers {
		fmt.Fprintf(w, " %10s %10s", fmt.Sprintf("cpu @%d", c), fmt.Sprintf("own @%d", c))
	}
	fmt.Fprintln(w)
	rows := []ForkStats{r.Floor, r.Python, r.Durable, r.FreshNoop, r.FreshFibo}
	if r.reuseTaken {
		rows = append(rows, r.ReuseNoop, r.ReuseFibo)
	}
	for _, s := range rows {
		fmt.Fprintf(w, "%-24s %9s %9s", s.Name, round(s.P50), round(s.P99))
		for i, rt := range s.Rates {
			fmt.Fprintf(w, " %9.1f/s %7.2fx", rt, rt/r.Floor.Rates[i])
		}
		for i := range s.CPU {
			fmt.Fprintf(w, " %10s %10s", round(s.CPU[i]), round(s.Own[i]))
		}
		fmt.Fprintln(w)
	}
	budget := func(cpu func(ForkStats) time.Duration) time.Duration {
		return time.Duration(1.2 * float64(cpu(r.Python)+cpu(r.Durable)))
	}
	machine := func(s ForkStats) time.Duration { return s.CPU[0] }
	own := func(s ForkStats) time.Duration { return s.Own[0] }
	if r.OwnSkip != "" {
		own = machine
	}
	fmt.Fprintf(w, "fresh fibo(10), cpu a call at %d callers: machine %s, %.2fx 1.2 x (python3 -c pass + durable call) = %s; own %s, %.2fx its %s (target: at most 1x)\n",
		ForkCallers[0], round(machine(r.FreshFibo)), float64(machine(r.FreshFibo))/float64(budget(machine)), round(budget(machine)),
		round(own(r.FreshFibo)), float64(own(r.FreshFibo))/float64(budget(own)), round(budget(own)))
	fmt.Fprintf(w, "fresh bash no-op: rate %.2fx the floor's at %d callers (target: at least 0.7x), %.2fx at %d; p50 %.2fx the floor\n",
		r.FreshNoop.Rates[0]/r.Floor.Rates[0], ForkCallers[0], r.FreshNoop.Rates[1]/r.Floor.Rates[1], ForkCallers[1], float64(r.FreshNoop.P50)/float64(r.Floor.P50))
	if !r.reuseTaken {
		fmt.Fprintf(w, "reuse: not measured: %s\n", r.ReuseSkip)
		return
	}
	fmt.Fprintf(w, "reuse: bash no-op: p50 %.2fx the floor (target: at most 0.5x); rate %.2fx the floor's at %d callers, %.2fx at %d (target: at least 2x); cpu a call %.2fx the durable call's (machine; own %.2fx; target: at most 2x)\n",
		float64(r.ReuseNoop.P50)/float64(r.Floor.P50), r.ReuseNoop.Rates[0]/r.Floor.Rates[0], ForkCallers[0], r.ReuseNoop.Rates[1]/r.Floor.Rates[1], ForkCallers[1],
		float64(machine(r.ReuseNoop))/float64(machine(r.Durable)), float64(own(r.ReuseNoop))/float64(own(r.Durable)))
	fmt.Fprintf(w, "reuse: fibo(10): rate %.2fx a jailed python3 -c pass's at %d callers, %.2fx at %d (target: at least 3x)\n",
		r.ReuseFibo.Rates[0]/r.Python.Rates[0], ForkCallers[0], r.ReuseFibo.Rates[1]/r.Python.Rates[1], ForkCallers[1])
}
