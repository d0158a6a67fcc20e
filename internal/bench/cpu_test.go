package bench

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The machine's busy time must count work done: this process's own CPU time over a spin is
// part of it.
func TestMachineBusyCountsWork(t *testing.T) {
	own := func() time.Duration {
		var ru unix.Rusage
		if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	before, err := machineBusy()
	if err != nil {
		t.Fatal(err)
	}
	ownBefore := own()
	for x, start := 0, time.Now(); time.Since(start) < 300*time.Millisecond; x++ {
		_ = x * x
	}
	spun := own() - ownBefore
	after, err := machineBusy()
	if err != nil {
		t.Fatal(err)
	}
	// Ticks are 10 ms; a spin of spun costs the machine at least that much, less a tick or two.
	if got := after - before; got < spun-50*time.Millisecond {
		t.Errorf("the machine was busy %v while this process alone used %v", got, spun)
	}
}

func TestRateAndCPUDividesByRuns(t *testing.T) {
	r, cpu, err := rateAndCPU(func() (float64, error) {
		for start := time.Now(); time.Since(start) < 200*time.Millisecond; {
		}
		return 42, nil
	}, 10)
	if err != nil || r != 42 {
		t.Fatalf("rateAndCPU = %v, %v; want the run's rate, 42", r, err)
	}
	if cpu <= 0 {
		t.Errorf("10 runs of a 200 ms spin cost %v each; want more than nothing", cpu)
	}
}
