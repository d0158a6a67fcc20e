package sandbox

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// BenchmarkBwrapNoop measures a jailed `bash -c true` through the full Run
// path (validation, supervision, waiting for the namespace to go):
// "hardened" with seccomp, a cgroup per run and rlimits, "plain" with
// bubblewrap's namespaces alone, "bare" with bwrap and the plain args
// alone, the floor the jail itself costs. "interleaved" alternates hardened
// and plain runs, so that both see the same machine state, and reports
// their ratio (hardened/plain): the hardening's cost, which must stay
// within 1.2.
func BenchmarkBwrapNoop(b *testing.B) {
	hardened, plain := newTestBwrap(b), newPlainBwrap(b)
	spec := &Spec{Argv: bash("true"), WorkDir: testDir(b, hardened, true)}
	runOnce := func(b *testing.B, j *Bwrap) time.Duration {
		t0 := time.Now()
		res, err := Run(context.Background(), j, spec)
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("%+v %v", res, err)
		}
		return time.Since(t0)
	}

	for _, bc := range []struct {
		name string
		j    *Bwrap
	}{{"hardened", hardened}, {"plain", plain}} {
		b.Run(bc.name, func(b *testing.B) {
			var start time.Duration
			for b.Loop() {
				res, err := Run(context.Background(), bc.j, spec)
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("%+v %v", res, err)
				}
				start += res.StartDelay
			}
			b.ReportMetric(float64(start.Microseconds())/float64(b.N), "start-µs/op")
		})
	}
	b.Run("interleaved", func(b *testing.B) {
		var h, p time.Duration
		for b.Loop() {
			h += runOnce(b, hardened)
			p += runOnce(b, plain)
		}
		b.ReportMetric(float64(h)/float64(p), "hardened/plain")
	})
	b.Run("bare", func(b *testing.B) {
		args, copied := plain.args(spec)
		for b.Loop() {
			cmd := exec.Command(plain.Path(), args...)
			// The /etc files on fds from etcFirstFD on, as Run passes them;
			// /dev/null on the fds before, which Run uses for its pipes.
			paths := slices.Concat(slices.Repeat([]string{os.DevNull}, plain.etcFirstFD()-3), copied)
			for _, p := range paths {
				f, err := openEtcFile(p)
				if err != nil {
					b.Fatal(err)
				}
				cmd.ExtraFiles = append(cmd.ExtraFiles, f)
			}
			cmd.Env = []string{"PATH=" + JailPath, "HOME=" + JobDir}
			cmd.Dir = "/"
			cmd.SysProcAttr = plain.sysProcAttr()
			out, err := cmd.CombinedOutput()
			for _, f := range cmd.ExtraFiles {
				f.Close()
			}
			if err != nil {
				b.Fatalf("%v: %s", err, out)
			}
		}
	})
}

// BenchmarkDirectNoop is the unjailed baseline for BenchmarkBwrapNoop.
func BenchmarkDirectNoop(b *testing.B) {
	d := NewDirect()
	spec := &Spec{Argv: bash("true"), WorkDir: testDir(b, nil, true)}
	for b.Loop() {
		res, err := Run(context.Background(), d, spec)
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("%+v %v", res, err)
		}
	}
}
