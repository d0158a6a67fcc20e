package functions

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/agenthost/host/internal/annot"
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

// RefuseToolCycles removes from fns every function whose tools: line leads back to itself
// (a: tools: a, or a: tools: b and b: tools: a) and returns an error for each, at its tools:
// line, naming the cycle. A job waits for its tool calls while it holds a run slot of its
// function, so a cycle can fill every slot with callers waiting for calls that need one of
// those slots: they wait until their timeout, and are retried into the same wait. Refusing
// the cycle at load makes that impossible among one directory's functions; the host's bound
// on nested calls (--tool-depth) stops what spans hosts whose directories differ.
func RefuseToolCycles(fns map[string]*Function) []error {
	var errs []error
	var cyclic []string
	for _, name := range sortedNames(fns) {
		path := cycleFrom(fns, name)
		if path == nil {
			continue
		}
		f := fns[name]
		entry := f.Root
		if f.Folder {
			entry = filepath.Join(f.Root, f.Entry)
		}
		errs = append(errs, &Error{Path: entry, Err: &annot.Error{File: entry, Line: f.Spec.ToolsLine, Msg: fmt.Sprintf(
			"tools: %s calls back into itself (%s): a job waits for its tool calls holding a run slot, so a cycle can leave every slot waiting for calls that can never run; "+
				"remove one of these tools: names (a tool that needs the caller's help should return and let the caller go on)",
			strings.Join(f.Spec.Tools, " "), strings.Join(path, " → "))}})
		cyclic = append(cyclic, name)
	}
	// Removed after every cycle is found, so that each function on a cycle is refused, not
	// only the first one seen.
	for _, name := range cyclic {
		delete(fns, name)
	}
	return errs
}

// cycleFrom returns a shortest chain of tools: names from start back to start ([a a], [a b a]),
// or nil when there is none. Names fns does not hold end a chain (UnknownTools reports them).
func cycleFrom(fns map[string]*Function, start string) []string {
	prev := map[string]string{}
	queue := []string{start}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, next := range fns[cur].Spec.Tools {
			if _, ok := fns[next]; !ok {
				continue
			}
			if next == start {
				path := []string{start}
				for n := cur; n != start; n = prev[n] {
					path = append(path, n)
				}
				path = append(path, start)
				slices.Reverse(path)
				return path
			}
			if _, seen := prev[next]; !seen {
				prev[next] = cur
				queue = append(queue, next)
			}
		}
	}
	return nil
}
