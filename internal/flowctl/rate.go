package flowctl

import (
	"context"
	"time"
)

// Start counts one start of a function's rate key, at most n per period: the starts of the
// last period are kept, and a start is refused when n of them are within it. It returns the
// time it counted the start at (the job's start, so that its record and the count agree) or,
// refused, when the oldest counted start leaves the period and one may start again.
func (s *Store) Start(ctx context.Context, function, key string, n int, period time.Duration) (ok bool, at time.Time, err error) {
	k := name("rate", function, key)
	err = s.change(ctx, k, func(e *entry) bool {
		now := s.now()
		from := now.Add(-period).UnixNano()
		kept := e.Starts[:0]
		for _, st := range e.Starts {
			if st > from {
				kept = append(kept, st)
			}
		}
		dropped := len(kept) != len(e.Starts)
		e.Starts = kept
		if len(e.Starts) >= n {
			ok, at = false, time.Unix(0, e.Starts[len(e.Starts)-n]).Add(period)
			return dropped
		}
		e.Key = key
		e.Starts = append(e.Starts, now.UnixNano())
		ok, at = true, now
		return true
	})
	return ok, at, err
}
