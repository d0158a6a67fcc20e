package bench

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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
	if cpu.machine <= 0 {
		t.Errorf("10 runs of a 200 ms spin cost %+v each; want more than nothing", cpu)
	}
}

// The benchmark's own CPU time must count a process nobody in it reaps: a jail's runtime,
// whose bwrap exits before reaping it, is one. The orphan says what CPU it used itself, so
// that a loaded machine, which gives it less, changes nothing.
func TestCPUGroupCountsOrphans(t *testing.T) {
	g, err := joinCPUGroup()
	if err != nil {
		t.Skipf("no cgroup of the benchmark's own here: %v", err)
	}
	defer g.leave()
	before, err := g.used()
	if err != nil {
		t.Fatal(err)
	}
	done := filepath.Join(t.TempDir(), "stat")
	// The child exits at once; its orphan counts to 100,000, then leaves its /proc stat line.
	spin := `(i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; cat /proc/$BASHPID/stat >"$1.tmp"; mv "$1.tmp" "$1") >/dev/null 2>&1 & exit 0`
	if out, err := exec.Command("bash", "-c", spin, "bash", done).CombinedOutput(); err != nil {
		t.Fatalf("start the orphan: %v: %s", err, out)
	}
	var stat []byte
	for stat, err = os.ReadFile(done); err != nil; stat, err = os.ReadFile(done) {
		time.Sleep(10 * time.Millisecond)
	}
	after, err := g.used()
	if err != nil {
		t.Fatal(err)
	}
	// utime and stime, fields 14 and 15, in USER_HZ ticks; the fields after the command's ")".
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	utime, _ := strconv.Atoi(f[11])
	stime, _ := strconv.Atoi(f[12])
	orphan := time.Duration(utime+stime) * time.Second / userHZ
	if orphan < 30*time.Millisecond {
		t.Fatalf("the orphan used %v of CPU; too little to tell counted from not", orphan)
	}
	if got := after - before; got < orphan-20*time.Millisecond {
		t.Errorf("the group counted %v while an orphan of its used %v", got, orphan)
	}
}
