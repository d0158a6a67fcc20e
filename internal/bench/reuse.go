package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The reused-jail measurements (issue 45): calls of functions whose jails serve many messages
// (`reuse:`), side by side in one run with the floor (a plain bwrap start), a plain jailed
// `python3 -c pass`, a minimal durable JetStream call, and the same bash no-op served fresh (a
// warm jail per call, the default); rates and machine CPU a call at 2 and 8 callers
// (ForkCallers); and a map of MapItems items onto a reused no-op, joined.
func reuseFunctions() map[string]string {
	files := map[string]string{
		"noop.sh":  "# sandbox\n# reuse: 10000\ntrue\n",
		"fresh.sh": "# sandbox\ntrue\n",
		"fibo.py":  strings.Replace(forkFunctions["fibo.py"], "# sandbox\n", "# sandbox\n# reuse: 10000\n", 1),
	}
	for name, src := range mapJoinFunctions(MapItems) {
		if name != "noop.sh" {
			files[name] = strings.Replace(src, "# sandbox\n", "# sandbox\n# reuse: 10000\n", 1)
		}
	}
	return files
}

// ReuseResult is one run of the reused-jail measurements.
type ReuseResult struct {
	N        int
	Floor    ForkStats     // plain bwrap, every namespace, bash -c true
	Python   ForkStats     // the same jail running python3 -c pass
	Noop     ForkStats     // agent.call of a bash no-op with reuse:
	Fresh    ForkStats     // of the same no-op without reuse: (a warm jail per call)
	Fibo     ForkStats     // of fibo(10) with reuse:
	Durable  ForkStats     // a minimal durable JetStream call (durableCall)
	Map      time.Duration // the map of MapItems items onto a reused no-op, joined
	MapFresh time.Duration // the same map onto the no-op without reuse:
	MapItems int
}

// RunReuse measures reused jails against their floors; n is the runs per measurement.
func RunReuse(ctx context.Context, n int, progress io.Writer) (ReuseResult, error) {
	res := ReuseResult{N: n, MapItems: MapItems}
	dir, fnDir, err := functionsDir("host-bench-reuse-", reuseFunctions())
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	callers := ForkCallers[len(ForkCallers)-1]
	h, err := startHost(ctx, dir, "reuse", fnDir, 0, callers)
	if err != nil {
		return res, err
	}
	defer h.close()
	var calls []func() error
	for _, fn := range []string{"noop", "fresh", "fibo"} {
		c, err := caller(ctx, h.client, fn)
		if err != nil {
			return res, err
		}
		calls = append(calls, c)
	}
	durable, err := startDurableCall(ctx, h.client.ConnectedUrl())
	if err != nil {
		return res, err
	}
	defer durable.close()
	pyPass := func() error { return runPlain(plainJail("python3", "-c", "pass")) }
	all := []named{
		{"bwrap floor", floor, nil},
		{"jailed python3 -c pass", pyPass, nil},
		{"call noop.sh, reuse:", calls[0], nil},
		{"call noop.sh, fresh (warm)", calls[1], h.warmRefilled("fresh")},
		{"call fibo.py, reuse:", calls[2], nil},
		{"durable JetStream call", func() error { return durable.call(ctx) }, nil},
	}
	fmt.Fprintf(progress, "reuse: %d runs of each, in turns: the floor, a jailed python3 -c pass, a bash no-op reused and fresh, fibo(10) reused, a durable call; then rates at %v callers…\n", n, ForkCallers)
	stats, err := forkStats(ctx, n, all)
	if err != nil {
		return res, err
	}
	res.Floor, res.Python, res.Noop, res.Fresh, res.Fibo, res.Durable = stats[0], stats[1], stats[2], stats[3], stats[4], stats[5]
	fmt.Fprintf(progress, "reuse: a map of %d items onto a reused bash no-op (concurrency %d), joined…\n", MapItems, callers)
	if res.Map, err = timeMap(ctx, h); err != nil {
		return res, err
	}
	durable.close() // again at the return: harmless
	h.close()
	fmt.Fprintf(progress, "reuse: the same map onto the fresh no-op (a warm jail per item)…\n")
	res.MapFresh, err = freshMap(ctx, dir, callers)
	return res, err
}

// freshMap times the map of MapItems items onto the no-op without reuse: (RunMapJoin's map), on
// a host of its own.
func freshMap(ctx context.Context, dir string, callers int) (time.Duration, error) {
	fnDir := filepath.Join(dir, "fresh-functions")
	if err := os.Mkdir(fnDir, 0o755); err != nil {
		return 0, err
	}
	for name, src := range mapJoinFunctions(MapItems) {
		if err := os.WriteFile(filepath.Join(fnDir, name), []byte(src), 0o644); err != nil {
			return 0, err
		}
	}
	h, err := startHost(ctx, dir, "fresh", fnDir, 0, callers)
	if err != nil {
		return 0, err
	}
	defer h.close()
	for range 5 {
		if _, err := callOnce(ctx, h.client, "noop"); err != nil {
			return 0, err
		}
	}
	return timeMap(ctx, h)
}

// ReportReuse prints the measurements and the targets, met or not.
func ReportReuse(w io.Writer, r ReuseResult) {
	fmt.Fprintf(w, "%-28s %10s %10s", "measurement", "p50", "p99")
	for _, c := range ForkCallers {
		fmt.Fprintf(w, " %11s %11s", fmt.Sprintf("rate @%d", c), fmt.Sprintf("CPU/run @%d", c))
	}
	fmt.Fprintln(w)
	for _, s := range []ForkStats{r.Floor, r.Python, r.Noop, r.Fresh, r.Fibo, r.Durable} {
		fmt.Fprintf(w, "%-28s %10s %10s", s.Name, round(s.P50), round(s.P99))
		for i := range ForkCallers {
			fmt.Fprintf(w, " %9.1f/s %11s", s.Rates[i], round(s.CPU[i]))
		}
		fmt.Fprintln(w)
	}
	met := func(ok bool) string {
		if ok {
			return "met"
		}
		return "NOT met"
	}
	p50 := float64(r.Noop.P50) / float64(r.Floor.P50)
	fmt.Fprintf(w, "reuse: bash no-op p50: %.2fx the floor (target at most 0.5x: %s)\n", p50, met(p50 <= 0.5))
	for i, c := range ForkCallers {
		x := r.Noop.Rates[i] / r.Floor.Rates[i]
		fmt.Fprintf(w, "reuse: bash no-op rate at %d callers: %.2fx the floor's (target at least 2x: %s); fresh: %.2fx\n", c, x, met(x >= 2), r.Fresh.Rates[i]/r.Floor.Rates[i])
	}
	for i, c := range ForkCallers {
		x := float64(r.Noop.CPU[i]) / float64(r.Durable.CPU[i])
		fmt.Fprintf(w, "reuse: no-op machine CPU a call at %d callers: %s, %.2fx the durable call's %s (target at most 2x: %s)\n", c, round(r.Noop.CPU[i]), x, round(r.Durable.CPU[i]), met(x <= 2))
	}
	for i, c := range ForkCallers {
		x := r.Fibo.Rates[i] / r.Python.Rates[i]
		fmt.Fprintf(w, "reuse: Python fibo(10) rate at %d callers: %.2fx a jailed python3 -c pass (target at least 3x: %s)\n", c, x, met(x >= 3))
	}
	fmt.Fprintf(w, "reuse: a map of %d items onto a reused no-op, joined: %s (target at most 2s: %s); onto the fresh no-op: %s (%.2fx)\n",
		r.MapItems, round(r.Map), met(r.Map <= 2*time.Second), round(r.MapFresh), float64(r.Map)/float64(r.MapFresh))
}
