package flowctl

import (
	"context"
	"time"
)

// Acquire takes one of a function's n runs of key for job, leased to host for lease. It
// reports whether it got it and, when not, how many runs hold the key. A job that already
// holds the key (its message delivered again after its host died) gets it again: the lease
// is the job's, not the host's. Holders whose lease has passed are dropped.
func (s *Store) Acquire(ctx context.Context, function, key, job, host string, n int, lease time.Duration) (ok bool, running int, err error) {
	k := name("limit", function, key)
	err = s.change(ctx, k, func(e *entry) bool {
		now := s.now()
		pruned := prune(e, now)
		_, again := e.Holders[job]
		if !again && len(e.Holders) >= n {
			ok, running = false, len(e.Holders)
			return pruned
		}
		if e.Holders == nil {
			e.Holders = map[string]Holder{}
		}
		e.Key = key
		e.Holders[job] = Holder{Host: host, Until: now.Add(lease)}
		ok, running = true, len(e.Holders)
		return true
	})
	return ok, running, err
}

// Renew extends job's lease on key; it reports false when the job no longer held it (its lease
// ran out while this host could not reach NATS, and another may have taken its place).
func (s *Store) Renew(ctx context.Context, function, key, job, host string, lease time.Duration) (held bool, err error) {
	k := name("limit", function, key)
	err = s.change(ctx, k, func(e *entry) bool {
		h, ok := e.Holders[job]
		now := s.now()
		held = ok && h.Until.After(now)
		if !held {
			return false
		}
		e.Holders[job] = Holder{Host: host, Until: now.Add(lease)}
		return true
	})
	return held, err
}

// Release gives back job's run of key.
func (s *Store) Release(ctx context.Context, function, key, job string) error {
	k := name("limit", function, key)
	return s.change(ctx, k, func(e *entry) bool {
		pruned := prune(e, s.now())
		if _, ok := e.Holders[job]; !ok {
			return pruned
		}
		delete(e.Holders, job)
		return true
	})
}

// Holders are the runs holding key now, by job id.
func (s *Store) Holders(ctx context.Context, function, key string) (map[string]Holder, error) {
	e, _, err := s.read(ctx, name("limit", function, key))
	if err != nil {
		return nil, err
	}
	prune(&e, s.now())
	return e.Holders, nil
}

// prune drops the holders whose lease has passed; it reports whether it dropped any.
func prune(e *entry, now time.Time) bool {
	dropped := false
	for job, h := range e.Holders {
		if !h.Until.After(now) {
			delete(e.Holders, job)
			dropped = true
		}
	}
	return dropped
}
