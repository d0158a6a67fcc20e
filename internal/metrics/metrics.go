// Package metrics makes a package's Prometheus series once per registry, through promauto, so
// that the instances sharing a registry (a process's volume stores or egress proxies, a test's)
// count into the same series rather than clash over their names.
package metrics

import (
	"reflect"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

type key struct {
	reg  prometheus.Registerer
	kind reflect.Type
}

var (
	mu   sync.Mutex
	made = map[key]any{} // kept for the life of the process, like the registries themselves
)

// Once returns the series of type T that make registered with reg (promauto.With(reg)),
// making them on the first call for reg. A nil reg registers nothing: each call makes series
// of its own. make panics, as promauto does, when reg holds other series of the same names.
func Once[T any](reg prometheus.Registerer, make func(f promauto.Factory) T) T {
	if reg == nil {
		return make(promauto.With(nil))
	}
	k := key{reg, reflect.TypeFor[T]()}
	mu.Lock()
	defer mu.Unlock()
	if m, ok := made[k]; ok {
		return m.(T)
	}
	m := make(promauto.With(reg))
	made[k] = m
	return m
}
