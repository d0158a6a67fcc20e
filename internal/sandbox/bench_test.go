package sandbox

import (
	"context"
	"os/exec"
	"testing"
)

// BenchmarkBwrapNoop measures a jailed `bash -c true`: "Run" through the
// full Run path (validation, supervision, waiting for the namespace to go),
// "bare" with bwrap and Args alone, the floor the jail itself costs.
func BenchmarkBwrapNoop(b *testing.B) {
	j := newTestBwrap(b)
	spec := &Spec{Argv: bash("true"), WorkDir: testDir(b, j, true)}

	b.Run("Run", func(b *testing.B) {
		for b.Loop() {
			res, err := j.Run(context.Background(), spec)
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("%+v %v", res, err)
			}
		}
	})
	b.Run("bare", func(b *testing.B) {
		args := j.Args(spec)
		for b.Loop() {
			cmd := exec.Command(j.Path(), args...)
			cmd.Env = []string{"PATH=" + JailPath, "HOME=" + JobDir}
			cmd.Dir = "/"
			cmd.SysProcAttr = j.sysProcAttr()
			if out, err := cmd.CombinedOutput(); err != nil {
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
		res, err := d.Run(context.Background(), spec)
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("%+v %v", res, err)
		}
	}
}
