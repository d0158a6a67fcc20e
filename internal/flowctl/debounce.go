package flowctl

import (
	"context"
	"time"
)

// debounceTouch is how often a key's entry is written again while messages of it wait, so that
// the bucket's TTL (25 h) does not expire it under a quiet period of up to 7 days: a waiting
// message looks again at least this often (see the host's debounce).
const debounceTouch = time.Hour

// Newest is the newest message of a debounce: key that any host has seen.
type Newest struct {
	Job string
	// Seq is its stream sequence: the order of messages, whichever host sees them first.
	Seq uint64
	// At is when it was published, from which its quiet period runs.
	At time.Time
}

// Debounce records that a message of a function's debounce: key was seen (job, its stream
// sequence seq, published at) and returns the newest message of the key: the message itself
// when no newer one has been seen. A message newer than the recorded one replaces it, by
// compare-and-set, so two hosts seeing two messages at once agree on the newer. The entry stays
// after the run (until the bucket's TTL, 25 h after its last write), so that an older message
// delivered again after its host died still finds the newer one and is superseded, never run.
func (s *Store) Debounce(ctx context.Context, function, key, job string, seq uint64, at time.Time) (Newest, error) {
	k := name("debounce", function, key)
	var n Newest
	err := s.change(ctx, k, func(e *entry) bool {
		now := s.now()
		switch {
		case e.Seq < seq:
			e.Key, e.Newest, e.Seq, e.At = key, job, seq, at.UnixNano()
		case now.Sub(time.Unix(0, e.Touched)) < debounceTouch:
			n = Newest{Job: e.Newest, Seq: e.Seq, At: time.Unix(0, e.At)}
			return false
		}
		e.Touched = now.UnixNano()
		n = Newest{Job: e.Newest, Seq: e.Seq, At: time.Unix(0, e.At)}
		return true
	})
	return n, err
}
