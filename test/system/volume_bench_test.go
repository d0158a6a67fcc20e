package system_test

import (
	"fmt"
	"testing"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// BenchmarkVolumeRerun is a rerun of a function whose volume (1,000 files, 100 MB) it does not
// change, on a bounded /job (the default: the checkout is copied from the host's cache into the
// job's tmpfs) and an unbounded one (--job-disk 0: the last run's checkout is renamed back).
func BenchmarkVolumeRerun(b *testing.B) {
	hosttest.RequireBwrap(b)
	files := map[string]string{
		"fill.py": `# sandbox
# volume: bench-rerun data
import os
def main():
    for i in range(1000):
        with open(f"/job/data/f{i}", "wb") as f:
            f.write(os.urandom(100_000))
    return "filled"
`,
		"read.sh": `# sandbox
# warm: 0
# volume: bench-rerun data
ls /job/data | wc -l`,
	}
	for _, c := range []struct {
		name string
		disk int64
	}{{"bounded", 0}, {"unbounded", -1}} {
		b.Run(c.name, func(b *testing.B) {
			h := hosttest.New(b, files, func(cfg *app.Config) { cfg.JobDisk = c.disk })
			if got := string(h.Call("fill", `{}`).Data); got != `"filled"` {
				b.Fatalf("fill: %s", got)
			}
			h.Call("read", `{}`) // the first read leaves the warm checkout
			for b.Loop() {
				reply := h.Call("read", `{}`)
				if reply.Header.Get(bus.HeaderJobStatus) != "succeeded" || string(reply.Data) != "1000" {
					b.Fatal(fmt.Sprintf("read: %s", reply.Data))
				}
			}
		})
	}
}
