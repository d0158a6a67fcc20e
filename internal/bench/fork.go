package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/agenthost/host/internal/app"
)

// The fork measurements (issue 29): jailed Python calls served by a fork of their function's
// template (serve --fork), side by side with the floor, a plain jailed `python3 -c pass` and the
// same calls served by warm jails, at 2 and 8 callers; and the memory of a template and a fork.
var forkFunctions = map[string]string{
	"noop.py": "# sandbox\ndef main():\n    return None\n",
	"fibo.py": `# sandbox
def fibo(n):
    return n if n < 2 else fibo(n - 1) + fibo(n - 2)

def main():
    return fibo(10)
`,
	// Holds its fork while the benchmark reads its memory.
	"hold.py": "# sandbox\nimport time\n\ndef main():\n    time.sleep(3)\n",
}

// ForkCallers are the numbers of concurrent callers the fork rates are measured at.
var ForkCallers = []int{2, 8}

// ForkResult is one run of the fork measurements.
type ForkResult struct {
	N      int
	Floor  ForkStats // plain bwrap, every namespace, bash -c true
	Python ForkStats // the same jail running python3 -c pass
	Noop   ForkStats // agent.call of a no-op Python function, default network, --fork
	Fibo   ForkStats // of fibo(10), --fork
	Warm   ForkStats // of fibo(10), warm jails (no --fork)
	// Durable is a minimal durable call on the fork host's server (durableCall): what the bus
	// alone costs a call that is stored, fetched, recorded once, answered and acked.
	Durable ForkStats
	Memory  ForkMemory
}

// ForkStats are one measurement's latencies (sequential) and rates (at each of ForkCallers).
type ForkStats struct {
	Name     string
	P50, P99 time.Duration
	Rates    []float64
	// CPU is the machine's CPU time per run at each of ForkCallers (machineBusy): the runs'
	// own processes, the jails' and the kernel's work for them. On a machine whose cores are
	// all busy at those rates, it is what bounds them.
	CPU []time.Duration
	// Own is the CPU time per run of this process and the children it reaped (ownCPU), at
	// each of ForkCallers: the part of CPU that is the measured runs', whatever else the
	// machine is doing.
	Own []time.Duration
}

// ForkMemory is proportional set sizes (smaps_rollup Pss) in bytes.
type ForkMemory struct {
	Template     int64 // an idle template: its bwrap init and its runtime
	Spare        int64 // one of the spare forks it keeps sealed ahead (both processes), on average
	SpareRSS     int64
	Fork         int64 // a running fork: the job's process and the fork's first process (its keeper)
	WarmJail     int64 // a waiting warm jail of the same function: its bwrap init and runtime
	TemplateRSS  int64
	ForkRSS      int64
	WarmJailRSS  int64
	ForkMeasured bool
}

// RunFork measures forked calls against the floor; n is the runs per measurement.
func RunFork(ctx context.Context, n int, progress io.Writer) (ForkResult, error) {
	res := ForkResult{N: n}
	dir, fnDir, err := functionsDir("host-bench-fork-", forkFunctions)
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	callers := ForkCallers[len(ForkCallers)-1]
	fh, err := startHost(ctx, dir, "fork", fnDir, 0, callers, func(c *app.Config) { c.Fork = true })
	if err != nil {
		return res, err
	}
	defer fh.close()
	if err := fh.templatesReady(len(forkFunctions)); err != nil {
		return res, err
	}
	wh, err := startHost(ctx, dir, "warm", fnDir, 0, callers)
	if err != nil {
		return res, err
	}
	defer wh.close()
	noop, err := caller(ctx, fh.client, "noop")
	if err != nil {
		return res, err
	}
	fibo, err := caller(ctx, fh.client, "fibo")
	if err != nil {
		return res, err
	}
	warm, err := caller(ctx, wh.client, "fibo")
	if err != nil {
		return res, err
	}
	durable, err := startDurableCall(ctx, fh.client.ConnectedUrl())
	if err != nil {
		return res, err
	}
	defer durable.close()
	pyPass := func() error { return runPlain(plainJail("python3", "-c", "pass")) }
	all := []named{
		{"bwrap floor", floor, nil},
		{"jailed python3 -c pass", pyPass, nil},
		{"call noop.py, --fork", noop, nil},
		{"call fibo.py, --fork", fibo, nil},
		{"call fibo.py, warm", warm, wh.warmRefilled("fibo")},
		{"durable JetStream call", func() error { return durable.call(ctx) }, nil},
	}
	fmt.Fprintf(progress, "fork: %d runs of each, in turns: the floor, a jailed python3 -c pass, Python no-op and fibo(10) calls forked from templates, and fibo(10) from warm jails; then rates at %v callers…\n", n, ForkCallers)
	stats, err := forkStats(ctx, n, all)
	if err != nil {
		return res, err
	}
	res.Floor, res.Python, res.Noop, res.Fibo, res.Warm, res.Durable = stats[0], stats[1], stats[2], stats[3], stats[4], stats[5]

	fmt.Fprintln(progress, "fork: memory of an idle template, a running fork and a waiting warm jail…")
	if err := wh.warmRefilled("fibo")(); err != nil {
		return res, err
	}
	res.Memory.Template, res.Memory.TemplateRSS = jailMemory("--template", "fibo.py", memRuntime)
	res.Memory.Spare, res.Memory.SpareRSS = jailMemory("--template", "fibo.py", memSpare)
	if n := forkSpares("fibo.py"); n > 0 {
		res.Memory.Spare, res.Memory.SpareRSS = res.Memory.Spare/int64(n), res.Memory.SpareRSS/int64(n)
	}
	res.Memory.WarmJail, res.Memory.WarmJailRSS = jailMemory("--warm", "fibo.py", memRuntime)
	held := make(chan error, 1)
	go func() {
		_, err := callOnce(ctx, fh.client, "hold")
		held <- err
	}()
	time.Sleep(time.Second) // well into its 3 s
	res.Memory.Fork, res.Memory.ForkRSS = jailMemory("--template", "hold.py", memFork)
	res.Memory.ForkMeasured = res.Memory.Fork > 0
	if err := <-held; err != nil {
		return res, err
	}
	return res, nil
}

// forkStats runs each of all n times, in turns, for its latencies, then n times at each of
// ForkCallers callers for its rates and CPU.
func forkStats(ctx context.Context, n int, all []named) ([]ForkStats, error) {
	lats := make([][]time.Duration, len(all))
	for range n {
		for i, x := range all {
			t := time.Now()
			if err := x.fn(); err != nil {
				return nil, fmt.Errorf("%s: %w", x.name, err)
			}
			lats[i] = append(lats[i], time.Since(t))
			if x.settle != nil {
				if err := x.settle(); err != nil {
					return nil, fmt.Errorf("%s: %w", x.name, err)
				}
			}
		}
	}
	stats := make([]ForkStats, len(all))
	for i, x := range all {
		s := latencyStats(x.name, lats[i])
		stats[i] = ForkStats{Name: x.name, P50: s.P50, P99: s.P99}
		for _, c := range ForkCallers {
			r, cpu, err := rateAndCPU(func() (float64, error) { return rate(ctx, Options{N: n, Parallel: c}, x.fn) }, n)
			if err != nil {
				return nil, fmt.Errorf("%s at %d callers: %w", x.name, c, err)
			}
			stats[i].Rates = append(stats[i].Rates, r)
			stats[i].CPU = append(stats[i].CPU, cpu.machine)
			stats[i].Own = append(stats[i].Own, cpu.own)
		}
	}
	return stats, nil
}

// The processes jailMemory tells apart.
const (
	memRuntime = iota // a jail's runtime (pid 2 of its pid namespace), with its bwrap init
	memSpare          // a template's spare: its C1 and its C2, sealed (two filters), not handed a job (no stdin)
	memFork           // a fork serving a job: its C1 and the job's pid 1 (two filters, the job's stdin)
)

// jailMemory sums Pss and Rss over the processes whose command line holds both mode and
// script and that are of kind, with the parent that belongs to each (bwrap's init, a fork's C1).
func jailMemory(mode, script string, kind int) (pss, rss int64) {
	for _, pid := range jailProcs(mode, script, kind) {
		p, r := smapsRollup(pid)
		pp, pr := smapsRollup(readStatus(pid).ppid)
		pss, rss = pss+p+pp, rss+r+pr
	}
	return pss, rss
}

// forkSpares counts the spares of the template of script.
func forkSpares(script string) int { return len(jailProcs("--template", script, memSpare)) }

// jailProcs lists the processes whose command line holds both mode and script and that are of
// kind: told apart by how deep their pid namespace is, their seccomp filters and their stdin.
func jailProcs(mode, script string, kind int) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if !strings.Contains(string(cmd), mode) || !strings.Contains(string(cmd), script) {
			continue
		}
		st := readStatus(pid)
		switch {
		case kind == memRuntime && st.depth == 2 && st.nsPid == 2:
		case kind == memSpare && st.depth == 3 && st.filters == 2 && !hasStdin(pid):
		case kind == memFork && st.depth == 3 && st.filters == 2 && hasStdin(pid):
		default:
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// hasStdin says whether process pid has a descriptor 0: a spare's pid 1 has none until its
// job's stdio reaches it.
func hasStdin(pid int) bool {
	_, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/0", pid))
	return err == nil
}

// procStatus is what jailMemory reads of /proc/<pid>/status.
type procStatus struct {
	depth   int // pid namespaces the process is seen in (NSpid entries)
	nsPid   int // its pid in the innermost
	ppid    int
	filters int // seccomp filters
}

func readStatus(pid int) procStatus {
	var st procStatus
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "NSpid:":
			st.depth = len(f) - 1
			st.nsPid, _ = strconv.Atoi(f[len(f)-1])
		case "PPid:":
			st.ppid, _ = strconv.Atoi(f[1])
		case "Seccomp_filters:":
			st.filters, _ = strconv.Atoi(f[1])
		}
	}
	return st
}

// smapsRollup reads a process's Pss and Rss in bytes.
func smapsRollup(pid int) (pss, rss int64) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "Pss:":
			pss = kb << 10
		case "Rss:":
			rss = kb << 10
		}
	}
	return pss, rss
}

// templatesReady waits until the host has n templates ready (host_fork_templates_ready).
func (b *benchHost) templatesReady(n int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		families, err := b.reg.Gather()
		if err != nil {
			return err
		}
		var ready float64
		for _, f := range families {
			if f.GetName() == "host_fork_templates_ready" {
				for _, m := range f.GetMetric() {
					ready += m.GetGauge().GetValue()
				}
			}
		}
		if int(ready) >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%v of %d templates ready after 2 minutes (host_fork_templates_ready)", ready, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ReportFork prints the fork measurements against the targets.
func ReportFork(w io.Writer, r ForkResult, chain, forkChain ChainResult) {
	fmt.Fprintf(w, "\nfork per job (serve --fork), %d runs of each:\n", r.N)
	fmt.Fprintf(w, "%-26s %10s %10s", "measurement", "p50", "p99")
	for _, c := range ForkCallers {
		fmt.Fprintf(w, " %12s", fmt.Sprintf("rate @%d", c))
	}
	fmt.Fprintf(w, " %9s", "p50/floor")
	for _, c := range ForkCallers {
		fmt.Fprintf(w, " %9s", fmt.Sprintf("@%d/floor", c))
	}
	fmt.Fprintf(w, " %12s", fmt.Sprintf("cpu/run @%d", ForkCallers[0]))
	fmt.Fprintln(w)
	for _, s := range []ForkStats{r.Floor, r.Python, r.Noop, r.Fibo, r.Warm, r.Durable} {
		fmt.Fprintf(w, "%-26s %10s %10s", s.Name, round(s.P50), round(s.P99))
		for _, rt := range s.Rates {
			fmt.Fprintf(w, " %10.1f/s", rt)
		}
		fmt.Fprintf(w, " %8.2fx", float64(s.P50)/float64(r.Floor.P50))
		for i, rt := range s.Rates {
			fmt.Fprintf(w, " %8.2fx", rt/r.Floor.Rates[i])
		}
		fmt.Fprintf(w, " %12s", round(s.CPU[0]))
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "machine CPU per run at %d callers (all %d cores): floor %s, forked no-op call %s, warm fibo(10) call %s, durable JetStream call %s; so at most %.0f forked no-op calls/s here\n",
		ForkCallers[0], runtime.NumCPU(), round(r.Floor.CPU[0]), round(r.Noop.CPU[0]), round(r.Warm.CPU[0]), round(r.Durable.CPU[0]),
		float64(runtime.NumCPU())*float64(time.Second)/float64(max(r.Noop.CPU[0], time.Microsecond)))
	fmt.Fprintf(w, "no-op call, --fork: p50 %.2fx the floor (target: at most 0.5x); rate %.2fx the floor's at 2 callers, %.2fx at 8 (target: at least 1.0x)\n",
		float64(r.Noop.P50)/float64(r.Floor.P50), r.Noop.Rates[0]/r.Floor.Rates[0], r.Noop.Rates[1]/r.Floor.Rates[1])
	fmt.Fprintf(w, "no-op call, --fork, over a minimal durable JetStream call (store, fetch, one key-value write, reply, ack): +%s at p50; the durable call alone is %.2fx the floor\n",
		round(r.Noop.P50-r.Durable.P50), float64(r.Durable.P50)/float64(r.Floor.P50))
	fmt.Fprintf(w, "fibo(10) call, --fork: p50 %.2fx a jailed python3 -c pass (target: at most 0.5x); rate %.2fx its rate at 2 callers (target: at least 2x)\n",
		float64(r.Fibo.P50)/float64(r.Python.P50), r.Fibo.Rates[0]/r.Python.Rates[0])
	if forkChain.Total > 0 && forkChain.PythonPass > 0 {
		fmt.Fprintf(w, "40-step chain, --fork: %s, %.2fx 40 jailed python3 -c pass (target: at most 0.3x); with warm jails: %s (%.2fx)\n",
			round(forkChain.Total), float64(forkChain.Total)/float64(time.Duration(forkChain.Steps)*forkChain.PythonPass),
			round(chain.Total), float64(chain.Total)/float64(time.Duration(chain.Steps)*chain.PythonPass))
	}
	mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	fmt.Fprintf(w, "memory (PSS / RSS): idle template %s / %s, plus each of its spare forks %s / %s; running fork %s / %s; waiting warm jail %s / %s\n",
		mib(r.Memory.Template), mib(r.Memory.TemplateRSS), mib(r.Memory.Spare), mib(r.Memory.SpareRSS), mib(r.Memory.Fork), mib(r.Memory.ForkRSS), mib(r.Memory.WarmJail), mib(r.Memory.WarmJailRSS))
}
