package host

import (
	"context"
	"slices"
)

// Draining reports whether the host has begun to shut down: it takes no new job again, unlike
// a host that is not Ready only until NATS is back.
func (h *Host) Draining() bool { return h.draining.Load() }

// Serves reports whether some host serves name, as an agent.call is checked before it is
// queued: callers outside NATS (POST /run) are refused the same way.
func (h *Host) Serves(ctx context.Context, name string) bool { return h.servedNow(ctx, name) }

// ServedNames lists the functions this host serves or another announces, sorted.
func (h *Host) ServedNames(ctx context.Context) []string {
	h.mu.Lock()
	names := make([]string, 0, len(h.served))
	for n := range h.served {
		names = append(names, n)
	}
	h.mu.Unlock()
	if h.presence != nil {
		if entries, err := h.presence.List(ctx, ""); err == nil {
			for _, e := range entries {
				names = append(names, e.Function)
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}
