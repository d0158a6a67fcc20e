package functions

import (
	"fmt"
	"slices"

	"github.com/agenthost/host/internal/annot"
)

// AllowNetworkHostFlag is the serve flag an operator grants `network: host` with.
const AllowNetworkHostFlag = "--allow-network-host"

// ErrNetworkHost is why a `network: host` function the operator did not allow is refused.
type ErrNetworkHost struct{ Name string }

func (e *ErrNetworkHost) Error() string {
	return fmt.Sprintf("network: host lets the function reach everything the host can (its NATS included); refused unless the operator starts serve with %s %s", AllowNetworkHostFlag, e.Name)
}

// NetworkHostAllowed reports whether the operator's allow list (function names, or "*") lets
// the named function share the host's network.
func NetworkHostAllowed(allowed []string, name string) bool {
	return slices.Contains(allowed, "*") || slices.Contains(allowed, name)
}

// RefuseNetworkHost removes from fns every function with `network: host` that allowed does not
// name, and returns one *Error per function removed. The function's author writes the
// annotation, but only the operator may grant it: such a job shares the host's network
// namespace and reaches the host's own NATS, the JetStream API and every secret envelope in it.
func RefuseNetworkHost(fns map[string]*Function, allowed []string) []error {
	var errs []error
	for _, name := range sortedNames(fns) {
		f := fns[name]
		if f.Spec.Network.Mode != annot.NetworkHost || NetworkHostAllowed(allowed, name) {
			continue
		}
		errs = append(errs, &Error{Path: f.Root, Err: &ErrNetworkHost{Name: name}})
		delete(fns, name)
	}
	return errs
}

func sortedNames(fns map[string]*Function) []string {
	names := make([]string, 0, len(fns))
	for n := range fns {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
