package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
)

// chainSettle is the pause between the chain's warm-up run and its measured run.
const chainSettle = 3 * time.Second

// ChainSteps is the length of Windmill's published flow benchmark: 40 lightweight Python
// tasks, each computing fibo(10), run one after another.
const ChainSteps = 40

// ChainResult is one run of the chained flow.
type ChainResult struct {
	Steps int
	Total time.Duration   // first trigger published → last result received
	Run   []time.Duration // each step's run time (its job record's start to finish)
	Hop   []time.Duration // each step's finish → the next step's start
	// PythonPass is the p50 of a plain jailed `python3 -c pass` (the floor's jail), measured
	// before the chain's host starts: the target is a chain within half of 40 of them.
	PythonPass time.Duration
	Windmill   struct{ Normal, Dedicated time.Duration }
	Fork       bool // each step forked from its function's template (serve --fork)
}

func chainStep(i, n int) string {
	next := ""
	if i < n-1 {
		next = fmt.Sprintf("# next: agent.run.step%02d\n", i+1)
	}
	return "# sandbox\n" + next + `
def fibo(n):
    return n if n < 2 else fibo(n - 1) + fibo(n - 2)

def main(i: int = 0):
    return {"i": i + 1, "fibo": fibo(10)}
`
}

// RunChain builds the 40-step flow of jailed Python functions, runs it once to warm up and then
// measures one run.
func RunChain(ctx context.Context, progress io.Writer) (ChainResult, error) {
	return runChain(ctx, progress, false)
}

// RunChainFork is RunChain on a host that forks each step from its function's template
// (serve --fork).
func RunChainFork(ctx context.Context, progress io.Writer) (ChainResult, error) {
	return runChain(ctx, progress, true)
}

func runChain(ctx context.Context, progress io.Writer, fork bool) (ChainResult, error) {
	res := ChainResult{Steps: ChainSteps, Fork: fork}
	res.Windmill.Normal, res.Windmill.Dedicated = 4383*time.Millisecond, 2092*time.Millisecond
	files := map[string]string{}
	for i := range ChainSteps {
		files[fmt.Sprintf("step%02d.py", i)] = chainStep(i, ChainSteps)
	}
	dir, fnDir, err := functionsDir("host-chain-", files)
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	// The floor first, on a quiet machine: no host, no warm jail loading or waiting.
	var pass []time.Duration
	for range ChainSteps {
		t0 := time.Now()
		if err := runPlain(plainJail("python3", "-c", "pass")); err != nil {
			return res, err
		}
		pass = append(pass, time.Since(t0))
	}
	res.PythonPass = percentile(pass, 50)
	h, err := startHost(ctx, dir, "chain", fnDir, 0, 1, func(c *app.Config) { c.Fork = fork })
	if err != nil {
		return res, err
	}
	defer h.close()
	if fork {
		if err := h.templatesReady(ChainSteps); err != nil {
			return res, err
		}
	}
	last := make(chan *nats.Msg, 4)
	sub, err := h.client.ChanSubscribe(bus.ResultSubject(fmt.Sprintf("step%02d", ChainSteps-1)), last)
	if err != nil {
		return res, err
	}
	defer sub.Unsubscribe()
	if err := h.client.Flush(); err != nil {
		return res, err
	}
	js, err := h.jobs(ctx)
	if err != nil {
		return res, err
	}
	var flow string
	for round := range 2 { // the first round warms the page cache and the interpreter's files
		if round == 0 {
			fmt.Fprintf(progress, "chain: %d jailed Python steps, one warm-up run…\n", ChainSteps)
		} else {
			// Each step of the warm-up took its function's warm jail; the 40 replacements start
			// at once (Python and the step imported), which on a small machine takes a while. A
			// flow measured while they start measures their start, not the chain's hand-overs.
			fmt.Fprintf(progress, "chain: %s for the warm-up's warm jails to be replaced, then the measured run…\n", chainSettle)
			select {
			case <-time.After(chainSettle):
			case <-ctx.Done():
				return res, ctx.Err()
			}
		}
		flow = fmt.Sprintf("chain-%d-%d", round, time.Now().UnixNano())
		m := nats.NewMsg(bus.RunSubject("step00"))
		m.Data = []byte(`{"i":0}`)
		m.Header.Set(bus.HeaderMsgID, flow)
		start := time.Now()
		if err := h.client.PublishMsg(m); err != nil {
			return res, err
		}
		select {
		case <-last:
		case <-time.After(5 * time.Minute):
			return res, fmt.Errorf("chain did not finish in 5 minutes")
		case <-ctx.Done():
			return res, ctx.Err()
		}
		res.Total = time.Since(start)
	}
	recs, err := js.List(ctx, func(r *jobs.Record) bool { return r.FlowID == flow })
	if err != nil {
		return res, err
	}
	if len(recs) != ChainSteps {
		return res, fmt.Errorf("chain recorded %d steps, want %d", len(recs), ChainSteps)
	}
	slices.SortFunc(recs, func(a, b *jobs.Record) int { return a.Hop - b.Hop })
	for i, r := range recs {
		res.Run = append(res.Run, r.Finished.Sub(r.Started))
		if i > 0 {
			res.Hop = append(res.Hop, r.Started.Sub(recs[i-1].Finished))
		}
	}
	return res, nil
}

// ReportChain prints the chained flow's numbers next to Windmill's published ones.
func ReportChain(w io.Writer, r ChainResult) {
	how := "warm jails"
	if r.Fork {
		how = "forked from templates (--fork)"
	}
	fmt.Fprintf(w, "%d-step chained flow of jailed Python fibo(10), %s: total %s (Windmill, m4.large: %s normal, %s dedicated workers; target here: under 2s)\n",
		r.Steps, how, round(r.Total), r.Windmill.Normal, r.Windmill.Dedicated)
	if r.PythonPass > 0 {
		fmt.Fprintf(w, "  against %d plain jailed `python3 -c pass` (p50 %s each): %.2fx (target: at most 0.5x)\n",
			r.Steps, round(r.PythonPass), float64(r.Total)/float64(time.Duration(r.Steps)*r.PythonPass))
	}
	fmt.Fprintf(w, "  per-step run time: p50 %s, p99 %s\n", round(percentile(r.Run, 50)), round(percentile(r.Run, 99)))
	fmt.Fprintf(w, "  per-hop overhead (a step's end to the next step's start): p50 %s, p99 %s (target: under 2ms)\n",
		round(percentile(r.Hop, 50)), round(percentile(r.Hop, 99)))
}

func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

// functionsDir makes a directory for a benchmark's host, which the jail's user can pass
// through, with files written in its functions/; the caller removes dir.
func functionsDir(prefix string, files map[string]string) (dir, fnDir string, err error) {
	if dir, err = os.MkdirTemp("", prefix); err != nil {
		return "", "", err
	}
	fnDir = filepath.Join(dir, "functions")
	if err = os.Chmod(dir, 0o755); err == nil {
		err = os.MkdirAll(fnDir, 0o755)
	}
	for name, src := range files {
		if err != nil {
			break
		}
		err = os.WriteFile(filepath.Join(fnDir, name), []byte(src), 0o644)
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", "", err
	}
	return dir, fnDir, nil
}
