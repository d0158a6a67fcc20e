package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
)

// sweepStale removes run groups whose host process is gone: a host that
// crashed or was killed leaves its groups behind. Groups of a live host
// (another host sharing the parent) are left alone.
func (c *Cgroups) sweepStale() {
	for _, parent := range slices.Compact([]string{c.memParent, c.pidsParent}) {
		entries, err := os.ReadDir(parent)
		if err != nil {
			continue
		}
		for _, e := range entries {
			var hostPid, n int
			if !e.IsDir() {
				continue
			}
			if _, err := fmt.Sscanf(e.Name(), "run-%d-%d", &hostPid, &n); err != nil {
				if _, err := fmt.Sscanf(e.Name(), "probe-%d", &hostPid); err != nil {
					continue
				}
			}
			if hostPid == os.Getpid() || unix.Kill(hostPid, 0) != unix.ESRCH {
				continue
			}
			d := filepath.Join(parent, e.Name())
			g := &runGroup{version: c.version, dirs: []string{d}, memDir: d, pidsDir: d}
			_ = g.remove()
		}
	}
}
