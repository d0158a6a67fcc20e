package host

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/people"
)

// unknownGroups names every group an approve: ... by line names that no user of us has: a gate
// only the operator (and a signed link) can decide, which is seldom what its author meant. One
// warning per gate, at file:line, sorted.
func unknownGroups(fns map[string]*functions.Function, us people.Users) []string {
	have := map[string]bool{}
	for _, u := range us.ByName {
		for _, g := range u.Groups {
			have[g] = true
		}
	}
	var out []string
	for _, f := range fns {
		a := f.Spec.Approve
		if a == nil {
			continue
		}
		var missing []string
		for _, g := range a.Groups {
			if !have[g] {
				missing = append(missing, g)
			}
		}
		if len(missing) == 0 {
			continue
		}
		file := f.Root
		if f.Folder {
			file = filepath.Join(f.Root, f.Entry)
		}
		out = append(out, fmt.Sprintf("%s:%d: approve: by names the group(s) %s, which no user has: until one does, only the operator and a signed link can decide %s's steps; "+
			"add one with `host users add <name> --role approver --group %s`", file, a.Line, strings.Join(missing, ", "), f.Name, missing[0]))
	}
	slices.Sort(out)
	return out
}

// warnUnknownGroups logs unknownGroups for fns and the users as they are.
func (h *Host) warnUnknownGroups(ctx context.Context, fns map[string]*functions.Function) {
	if h.people == nil {
		return
	}
	us, err := h.people.Load(ctx)
	if err != nil {
		h.log.Warn("cannot read the users to check the groups approve: lines name", zap.Error(err))
		return
	}
	for _, w := range unknownGroups(fns, us) {
		h.log.Warn("an approval names a group that no user has", zap.String("warning", w))
	}
}

// watchUsers warns again, whenever the users change, about the groups the served functions'
// approve: lines name that no user has (a user removed, a group renamed), until ctx ends.
func (h *Host) watchUsers(ctx context.Context) {
	if h.people == nil {
		return
	}
	changes, err := h.people.Watch(ctx)
	if err != nil {
		h.log.Warn("cannot follow the users; approve: groups are checked at each reload only", zap.Error(err))
		return
	}
	go func() {
		first := true
		for us := range changes {
			if first { // how they were at start: the load has warned already
				first = false
				continue
			}
			fns := map[string]*functions.Function{}
			for _, s := range h.servedSnapshot() {
				fns[s.fn.Name] = s.fn
			}
			for _, w := range unknownGroups(fns, us) {
				h.log.Warn("the users changed: an approval names a group that no user has", zap.String("warning", w))
			}
		}
	}()
}
