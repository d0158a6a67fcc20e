package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of /proc/stat's times: USER_HZ, which Linux fixes at 100 for user space
// whatever the kernel's own tick.
const userHZ = 100

// machineBusy is the CPU time the whole machine has spent not idle since boot, over every
// core: user, system, interrupts, steal. A rate's runs are not all in this process (jails,
// their runtimes, kernel workers tearing namespaces down), so what a call costs is read off the
// machine, and includes whatever else runs on it.
func machineBusy() (time.Duration, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("read the machine's CPU times: %w", err)
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return 0, fmt.Errorf("read the machine's CPU times: /proc/stat starts %q, not the cpu line", line)
	}
	var busy int64
	for i, f := range fields[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("read the machine's CPU times: field %d of %q: %w", i+1, line, err)
		}
		busy += v
	}
	return time.Duration(busy) * time.Second / userHZ, nil
}

// benchGroup, when set, is the cgroup the benchmark's processes are in (joinCPUGroup): what
// rateAndCPU reads as their own CPU time.
var benchGroup *cpuGroup

// ownCPU is the CPU time of every process of the benchmark (benchGroup), or 0 without a group.
func ownCPU() (time.Duration, error) {
	if benchGroup == nil {
		return 0, nil
	}
	return benchGroup.used()
}

// cpuPerRun is the CPU time per run of runs runs over one measurement: the machine's
// (machineBusy) and the benchmark's own (ownCPU, 0 when unknown).
type cpuPerRun struct{ machine, own time.Duration }

// rateAndCPU is rate, with the CPU time per run over the same runs.
func rateAndCPU(run func() (float64, error), runs int) (float64, cpuPerRun, error) {
	var cpu cpuPerRun
	before, err := machineBusy()
	if err != nil {
		return 0, cpu, err
	}
	ownBefore, err := ownCPU()
	if err != nil {
		return 0, cpu, err
	}
	r, err := run()
	if err != nil {
		return 0, cpu, err
	}
	after, err := machineBusy()
	if err != nil {
		return 0, cpu, err
	}
	ownAfter, err := ownCPU()
	if err != nil {
		return 0, cpu, err
	}
	cpu.machine, cpu.own = (after-before)/time.Duration(runs), (ownAfter-ownBefore)/time.Duration(runs)
	return r, cpu, nil
}
