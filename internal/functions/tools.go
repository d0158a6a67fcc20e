package functions

import (
	"fmt"
	"slices"
	"sort"
)

// UnknownTools reports each tools: line that names a function fns does not have: the job's
// calls of it would be refused as an unknown tool, which is more likely a typo than a wish.
func UnknownTools(fns map[string]*Function) []error {
	var errs []error
	names := make([]string, 0, len(fns))
	for name := range fns {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		f := fns[name]
		for _, tool := range f.Spec.Tools {
			if _, ok := fns[tool]; !ok {
				errs = append(errs, fmt.Errorf("%s: tools: names %s, which is not a function here; its calls from the job would be refused (served: %v)",
					f.Name, tool, slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == f.Name })))
			}
		}
	}
	return errs
}
