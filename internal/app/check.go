package app

import (
	"context"

	"github.com/agenthost/host/internal/check"
	"github.com/agenthost/host/internal/functions"
)

// checker is what a host refuses beyond loading: what `host check` refuses (a file that does
// not compile, no main), with the interpreters its packages are installed for.
func checker(cfg Config) func(ctx context.Context, f *functions.Function) error {
	o := check.Options{Bun: cfg.Packages.Bun}
	return func(ctx context.Context, f *functions.Function) error { return check.Function(ctx, f, o) }
}
