package runner

import (
	"context"
	"fmt"

	"github.com/agenthost/host/internal/functions"
)

// Prepare installs a function version's packages ahead of its first job, as that job would
// (ensurePackages), so that a host switching to a new deployment has them before it switches.
func (r *Runner) Prepare(ctx context.Context, f *functions.Function, codeDir string) error {
	if r.cfg.Packages == nil {
		return nil
	}
	if _, ok := r.installed.Load(codeDir); ok {
		return nil
	}
	inst, err := r.cfg.Packages.Ensure(ctx, codeDir, f.Entry, func(string, ...any) {})
	if err != nil {
		return fmt.Errorf("install packages for %s: %w", f.Name, err)
	}
	r.installed.Store(codeDir, inst)
	return nil
}

// Forget drops what the runner keeps for the function version in codeDir, once no job will run
// it again (a draft's test run): without it, each draft run would leave an entry for good.
func (r *Runner) Forget(codeDir string) { r.installed.Delete(codeDir) }
