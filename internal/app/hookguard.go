package app

import (
	"context"
	"fmt"

	"github.com/agenthost/host/internal/runner"
	"github.com/agenthost/host/internal/secrets"
)

// hookGuard hands functions secrets, except the names webhook sources use as keys, whether
// declared by --hook or added with `host hooks add` (keyUser follows both, live). Those keys
// live in their own store, but one set the contract's way (`host secrets set <key>`) sits among
// the function secrets until the host moves it (at start, or at the next delivery); a function
// declaring it must not be handed it meanwhile.
type hookGuard struct {
	*secrets.Store
	keyUser func(name string) (source string, ok bool)
}

var _ runner.Secrets = hookGuard{}

func withoutHookKeys(s *secrets.Store, keyUser func(string) (string, bool)) runner.Secrets {
	return hookGuard{Store: s, keyUser: keyUser}
}

func (g hookGuard) refuse(name string) error {
	if src, ok := g.keyUser(name); ok {
		return fmt.Errorf("secret %q is the key of webhook source %q; webhook keys are never given to functions, "+
			"so that no function can sign deliveries: store the function's own credential under another name: %w",
			name, src, secrets.ErrUndeclared)
	}
	return nil
}

func (g hookGuard) Resolve(ctx context.Context, name string) (string, *secrets.Redactor, error) {
	if err := g.refuse(name); err != nil {
		return "", nil, err
	}
	return g.Store.Resolve(ctx, name)
}

func (g hookGuard) ResolveArgs(ctx context.Context, args map[string]any, declared func(string) bool) (map[string]any, *secrets.Redactor, error) {
	for _, name := range secrets.Refs(args) {
		if err := g.refuse(name); err != nil {
			return nil, nil, err
		}
	}
	return g.Store.ResolveArgs(ctx, args, declared)
}
