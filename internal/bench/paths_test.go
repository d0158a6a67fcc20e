package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/functions"
)

// The reuse: rows are functions that ask for it by annotation alone, and they are left out,
// saying why, exactly when this build's parser does not know the annotation.
func TestPathFunctionsAskForReuseByAnnotation(t *testing.T) {
	fns := pathFunctions(true)
	for _, name := range []string{"reuse-noop.sh", "reuse-fibo.py"} {
		if !strings.Contains(fns[name], "reuse: 100\n") {
			t.Errorf("%s is %q; want a reuse: 100 annotation", name, fns[name])
		}
	}
	if _, ok := pathFunctions(false)["reuse-noop.sh"]; ok {
		t.Error("the reuse: functions are written on a build that does not know the annotation")
	}
	dir, fnDir, err := functionsDir("paths-test-", fns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for name := range fns {
		fn, err := functions.LoadPath(filepath.Join(fnDir, name))
		if err != nil {
			t.Fatalf("%s does not load: %v", name, err)
		}
		if !fn.Spec.Sandbox {
			t.Errorf("%s is not jailed", name)
		}
	}
	if skip := reuseSkipped(); (skip == "") != annot.Known("reuse") {
		t.Errorf("reuseSkipped() = %q while annot.Known(reuse) = %v", skip, annot.Known("reuse"))
	}
}

func TestReportPathsSaysWhatWasLeftOut(t *testing.T) {
	stats := func(name string, p50, cpu time.Duration, rate float64) ForkStats {
		return ForkStats{Name: name, P50: p50, P99: p50, Rates: []float64{rate, rate}, CPU: []time.Duration{cpu, cpu}, Own: []time.Duration{cpu / 2, cpu / 2}}
	}
	r := PathsResult{N: 10,
		Floor: stats("bwrap floor", 5*time.Millisecond, 6*time.Millisecond, 300), Python: stats("jailed python3 -c pass", 13*time.Millisecond, 13*time.Millisecond, 100),
		Durable: stats("durable JetStream call", time.Millisecond, time.Millisecond, 1000), FreshNoop: stats("fresh bash no-op", 4*time.Millisecond, 12*time.Millisecond, 210),
		FreshFibo: stats("fresh fibo.py", 9*time.Millisecond, 17*time.Millisecond, 90), ReuseSkip: "no reuse here", OwnSkip: "no cgroup here"}
	var out bytes.Buffer
	ReportPaths(&out, r)
	for _, want := range []string{"reuse: not measured: no reuse here", "own cpu not measured: no cgroup here",
		"fresh bash no-op: rate 0.70x the floor's at 2 callers", "fresh fibo(10), cpu a call at 2 callers: machine 17ms, 1.01x"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, out.String())
		}
	}
	r.ReuseSkip, r.reuseTaken = "", true
	r.ReuseNoop, r.ReuseFibo = stats("reuse: bash no-op", time.Millisecond, 2*time.Millisecond, 900), stats("reuse: fibo.py", time.Millisecond, 3*time.Millisecond, 400)
	out.Reset()
	ReportPaths(&out, r)
	for _, want := range []string{"reuse: bash no-op: p50 0.20x the floor", "rate 3.00x the floor's at 2 callers", "reuse: fibo(10): rate 4.00x a jailed python3 -c pass's"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, out.String())
		}
	}
}
