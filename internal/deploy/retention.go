package deploy

import (
	"context"
	"fmt"
	"time"
)

// Retention: a deployment is kept while it is among the last KeepLast or younger than KeepFor,
// and the current one always. A flow pinned to a deployment that is collected fails its next
// step, naming it. Versions that no kept deployment names are collected with them, once older
// than objectGrace: a deploy puts its objects before it creates its deployment, and they must
// not be collected in between.
const (
	KeepLast    = 50
	KeepFor     = 30 * 24 * time.Hour
	objectGrace = time.Hour
)

// Collect deletes the deployments past the retention and the versions only they named. It
// returns how many deployments and versions it deleted.
func (s *Store) Collect(ctx context.Context) (deployments, versions int, err error) {
	nums, err := s.numbers(ctx)
	if err != nil {
		return 0, 0, err
	}
	cur, _, _ := s.current(ctx)
	referenced := map[string]bool{}
	for i, n := range nums {
		d, err := s.Get(ctx, n)
		if err != nil {
			continue
		}
		if n == cur || i >= len(nums)-KeepLast || s.now().Sub(d.At) < KeepFor {
			for name, v := range d.Functions {
				referenced[objectName(name, v.Hash)] = true
			}
			continue
		}
		if err := s.kv.Purge(ctx, key(n)); err != nil {
			return deployments, versions, fmt.Errorf("collect deployment %d: %w", n, err)
		}
		deployments++
	}
	infos, err := s.code.List(ctx)
	if err != nil {
		return deployments, 0, nil // an empty store answers with an error too
	}
	for _, info := range infos {
		if referenced[info.Name] || s.now().Sub(info.ModTime) < objectGrace {
			continue
		}
		if err := s.code.Delete(ctx, info.Name); err != nil {
			return deployments, versions, fmt.Errorf("collect version %s: %w", info.Name, err)
		}
		versions++
	}
	return deployments, versions, nil
}
