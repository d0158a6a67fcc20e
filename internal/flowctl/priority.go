package flowctl

import (
	"context"
	"strconv"
	"time"
)

// PriorityTTL is how long a priority level stays marked waiting after its last waiting message
// marked it: past the longest poll of a waiting message (2.5 s), so a level with waiting
// messages never lapses, and a level whose waiters all started or vanished (their host died)
// stops holding back the lower ones within it.
const PriorityTTL = 5 * time.Second

// Level is one priority level that has messages waiting.
type Level struct {
	// Until is when the mark lapses unless a waiting message renews it.
	Until int64 `json:"until"`
	// Job is the last message that marked it: when it starts, the mark goes at once (others of
	// its level mark it again when they next look).
	Job string `json:"job"`
}

// Priority reads, and changes, which priority levels of a function have messages waiting, in
// one entry per function (at most 10 levels, so its size is bounded whatever waits). A
// message of priority p that waits (wait: no run slot, or a limit:) marks its level; one about
// to start is held back when a higher level is marked (top > p), and then marks its own; one
// that starts clears its level's mark if it was the last to set it. It returns the highest
// marked level above p, or 0.
func (s *Store) Priority(ctx context.Context, function, job string, p int, wait bool) (top int, err error) {
	k := "priority." + function
	err = s.change(ctx, k, func(e *entry) bool {
		now := s.now()
		top = 0
		changed := false
		for l, lv := range e.Levels {
			n, _ := strconv.Atoi(l)
			switch {
			case lv.Until < now.UnixNano():
				delete(e.Levels, l)
				changed = true
			case n > p && n > top:
				top = n
			}
		}
		mine, marked := e.Levels[strconv.Itoa(p)]
		switch {
		case wait || top > p:
			// Written again only when the mark would lapse soon: many waiting messages of one
			// level do not all write it on every look.
			if !marked || mine.Until < now.Add(PriorityTTL/2).UnixNano() {
				if e.Levels == nil {
					e.Levels = map[string]Level{}
				}
				e.Levels[strconv.Itoa(p)] = Level{Until: now.Add(PriorityTTL).UnixNano(), Job: job}
				changed = true
			}
		case marked && mine.Job == job:
			delete(e.Levels, strconv.Itoa(p))
			changed = true
		}
		return changed
	})
	return top, err
}
