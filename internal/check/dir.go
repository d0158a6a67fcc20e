package check

import (
	"context"
	"maps"
	"slices"

	"github.com/agenthost/host/internal/functions"
)

// Dir checks a functions directory as `host check` does: it loads every function, then checks
// each that loaded with the tool of its runtime. It returns the functions that pass and the
// refusals (each naming its file, and line where known), and warnings for what serve may
// refuse depending on its flags (allowNetworkHost: serve's --allow-network-host). `host check`,
// `host deploy` and a serving host all refuse by it.
func Dir(ctx context.Context, dir string, o Options, allowNetworkHost []string) (fns map[string]*functions.Function, errs, warnings []error) {
	fns, errs = functions.Load(dir)
	for _, name := range slices.Sorted(maps.Keys(fns)) {
		if err := Function(ctx, fns[name], o); err != nil {
			errs = append(errs, err)
			delete(fns, name)
		}
	}
	warnings = functions.RefuseNetworkHost(maps.Clone(fns), allowNetworkHost)
	warnings = append(warnings, functions.UnknownTools(fns)...)
	return fns, errs, warnings
}
