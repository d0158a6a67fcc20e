package runner

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agenthost/host/internal/jailfs"
)

// TestClearRunDirUnmountsWhatAKilledHostLeft: a host killed mid-job leaves job trees (and
// perhaps a mount probe) mounted in its run directory; the next start must clear them, not
// fail on a busy mount point.
func TestClearRunDirUnmountsWhatAKilledHostLeft(t *testing.T) {
	run := t.TempDir()
	if err := jailfs.CanMount(run); err != nil {
		t.Skipf("SKIPPED: this host cannot mount a job tree (%v); CI runs as root and can", err)
	}
	job := filepath.Join(run, "job1-x", "job")
	probe := filepath.Join(run, "probe-x")
	for _, d := range []string{job, probe} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if _, err := jailfs.MountTree(d, 1<<20, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(job, "left.txt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := clearRunDir(run); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(run); len(left) != 0 {
		t.Fatalf("left in the run directory: %v", left)
	}
}
