package wire

import (
	"context"
	"fmt"

	"github.com/agenthost/host/internal/hooks"
	"github.com/agenthost/host/internal/runner"
	"github.com/agenthost/host/internal/secrets"
)

// hookGuard hands functions secrets, except the names this host's --hook sources use as keys.
// Those keys live in their own store, but one set the contract's way (`host secrets set <key>`)
// sits among the function secrets until the host moves it (at start, or at the next delivery);
// a function declaring it must not be handed it meanwhile.
type hookGuard struct {
	*secrets.Store
	keys map[string]string // key name -> source
}

var _ runner.Secrets = hookGuard{}

func withoutHookKeys(s *secrets.Store, sources []hooks.Source) runner.Secrets {
	g := hookGuard{Store: s, keys: map[string]string{}}
	for _, src := range sources {
		if src.Secret != "" {
			g.keys[src.Secret] = src.Name
		}
	}
	return g
}

func (g hookGuard) refuse(name string) error {
	if src, ok := g.keys[name]; ok {
		return fmt.Errorf("secret %q is the key of webhook source %q (--hook); webhook keys are never given to functions, "+
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
