package runner

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/objstore"
)

// volumeErr decides whether a job meets its volume failure again later (handed back) or at
// once on every try (terminal). Red team row 10: a crafted manifest in the store was handed
// back 12 times, as if the store were down.
func TestVolumeErrSortsFailures(t *testing.T) {
	for _, c := range []struct {
		name     string
		err      error
		terminal bool
	}{
		{"crafted manifest", fmt.Errorf("manifest m in jetstream:b is unsafe or corrupt, refusing to use it: manifest path \"../x\" leaves the volume: %w", objstore.ErrCorrupt), true},
		{"over the volume limit", fmt.Errorf("commit: %w", objstore.ErrLimit), true},
		{"store down", fmt.Errorf("read head of volume v: %w", context.DeadlineExceeded), false},
		{"lease lost", fmt.Errorf("commit: %w", objstore.ErrLeaseLost), false},
	} {
		err := volumeErr("mount volume v", c.err)
		if jobtype.IsTerminal(err) != c.terminal {
			t.Errorf("%s: terminal = %v, want %v (%v)", c.name, jobtype.IsTerminal(err), c.terminal, err)
		}
		if !c.terminal && !errors.As(err, new(*jobtype.UnavailableError)) {
			t.Errorf("%s: %v is not an UnavailableError, so the job would not wait for the store", c.name, err)
		}
		if !errors.Is(err, c.err) && !errors.Is(err, errors.Unwrap(c.err)) {
			t.Errorf("%s: the cause is lost: %v", c.name, err)
		}
	}
}
