package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A named schedule is one added by name (`host schedules add`, the dashboard's Schedules page)
// rather than declared by a function's schedule: line: it sends its own arguments to a function
// on each tick, and a function may have several. It lives in Bucket under named.<name>, which
// every host watches, so it is added, changed, paused and removed on every host at once.
const (
	namedPrefix    = "named."
	namedTickKey   = "namedtick."
	maxNamedArgs   = 64 << 10
	namedNameLimit = 63
)

// ErrNoNamed is wrapped by the errors for a named schedule the bucket does not hold.
var ErrNoNamed = errors.New("no such named schedule")

// ErrNamedExists is wrapped by the error for adding a schedule under a name already taken.
var ErrNamedExists = errors.New("a schedule of that name exists")

// namedName is what a schedule's name may be: it becomes a KV key token and part of a message id.
var namedName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// Named is a schedule added by name.
//
//	name      its name, unique among named schedules
//	function  the function each tick runs
//	schedule  five cron fields, @every <duration> or a descriptor (Parse)
//	args      the JSON object each tick sends as the job's arguments
//	paused    whether ticks are skipped; paused_by and paused_at say who paused it and when
type Named struct {
	Name     string          `json:"name"`
	Function string          `json:"function"`
	Schedule string          `json:"schedule"`
	Args     json.RawMessage `json:"args,omitempty"`
	AddedBy  string          `json:"added_by,omitempty"`
	Added    time.Time       `json:"added,omitzero"`
	Paused   bool            `json:"paused,omitempty"`
	PausedBy string          `json:"paused_by,omitempty"`
	PausedAt time.Time       `json:"paused_at,omitzero"`
	// Next and LastTick are filled in by ListNamed, never stored here.
	Next     time.Time `json:"next,omitzero"`
	LastTick time.Time `json:"last_tick,omitzero"`
}

// CheckNamedName refuses a name a named schedule cannot have.
func CheckNamedName(name string) error {
	if !namedName.MatchString(name) {
		return fmt.Errorf("schedule name %q: use 1 to %d lower-case letters, digits, - and _, starting with a letter or digit (it becomes part of a NATS key)", name, namedNameLimit)
	}
	return nil
}

// CheckArgs checks what a named schedule sends: a JSON object ("" is {}), at most 64 KiB; it
// returns it compacted.
func CheckArgs(args string) (json.RawMessage, error) {
	args = strings.TrimSpace(args)
	if args == "" {
		return json.RawMessage(`{}`), nil
	}
	if len(args) > maxNamedArgs {
		return nil, fmt.Errorf("arguments: %d bytes, more than the %d a schedule may send; keep large inputs in a volume and send its path", len(args), maxNamedArgs)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(args), &obj); err != nil || obj == nil {
		if err == nil {
			err = errors.New("null")
		}
		return nil, fmt.Errorf("arguments must be a JSON object such as {\"name\": \"x\"}: %w", err)
	}
	out, _ := json.Marshal(obj)
	return out, nil
}

// NextN is the first n ticks of expr strictly after now, as every host computes them (Next).
func NextN(expr string, now time.Time, n int) ([]time.Time, error) {
	sched, err := Parse(expr)
	if err != nil {
		return nil, err
	}
	var out []time.Time
	for t := now; len(out) < n; {
		t = Next(sched, t)
		if t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out, nil
}

// AddNamed stores n; with replace it may overwrite the schedule of that name (keeping whether
// it is paused), otherwise a taken name is refused with ErrNamedExists. The caller checked n
// (client.CheckNamed).
func (s *Store) AddNamed(ctx context.Context, n Named, replace bool) (replaced bool, err error) {
	if err := CheckNamedName(n.Name); err != nil {
		return false, err
	}
	key := namedPrefix + n.Name
	n.Next, n.LastTick = time.Time{}, time.Time{}
	if !replace {
		b, _ := json.Marshal(n)
		if _, err := s.kv.Create(ctx, key, b); err != nil {
			if errors.Is(err, jetstream.ErrKeyExists) {
				return false, fmt.Errorf("add schedule %s: %w; pick another name, or edit that one", n.Name, ErrNamedExists)
			}
			return false, fmt.Errorf("add schedule %s to bucket %s: %w", n.Name, Bucket, err)
		}
		return false, nil
	}
	old, rev, err := s.getNamed(ctx, n.Name)
	if err != nil {
		return false, fmt.Errorf("edit schedule %s: %w", n.Name, err)
	}
	n.Paused, n.PausedBy, n.PausedAt = old.Paused, old.PausedBy, old.PausedAt
	if n.Added.IsZero() {
		n.Added = old.Added
	}
	b, _ := json.Marshal(n)
	if _, err := s.kv.Update(ctx, key, b, rev); err != nil {
		return false, fmt.Errorf("edit schedule %s: it changed meanwhile, reload and edit again: %w", n.Name, err)
	}
	return true, nil
}

// getNamed reads a named schedule and the revision it was read at.
func (s *Store) getNamed(ctx context.Context, name string) (Named, uint64, error) {
	if err := CheckNamedName(name); err != nil {
		return Named{}, 0, fmt.Errorf("%w: %w", ErrNoNamed, err)
	}
	e, err := s.kv.Get(ctx, namedPrefix+name)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return Named{}, 0, fmt.Errorf("%w %q in bucket %s; list them with `host schedules`", ErrNoNamed, name, Bucket)
	}
	if err != nil {
		return Named{}, 0, fmt.Errorf("read schedule %s: %w", name, err)
	}
	var n Named
	if err := json.Unmarshal(e.Value(), &n); err != nil {
		return Named{}, 0, fmt.Errorf("schedule %s in bucket %s is not a schedule entry: %w", name, Bucket, err)
	}
	return n, e.Revision(), nil
}

// GetNamed reads one named schedule.
func (s *Store) GetNamed(ctx context.Context, name string) (Named, error) {
	n, _, err := s.getNamed(ctx, name)
	return n, err
}

// RemoveNamed deletes a named schedule: no host fires it from then on.
func (s *Store) RemoveNamed(ctx context.Context, name string) error {
	if _, _, err := s.getNamed(ctx, name); err != nil {
		return fmt.Errorf("remove schedule %s: %w", name, err)
	}
	if err := s.kv.Purge(ctx, namedPrefix+name); err != nil {
		return fmt.Errorf("remove schedule %s from bucket %s: %w", name, Bucket, err)
	}
	_ = s.kv.Purge(ctx, namedTickKey+name) // only a listing's last tick
	return nil
}

// PauseNamed skips a named schedule's ticks on every host (by says who), or resumes them when
// by is "" (pause false); it reports whether the state changed.
func (s *Store) PauseNamed(ctx context.Context, name string, pause bool, by string) (bool, error) {
	verb := "pause"
	if !pause {
		verb = "resume"
	}
	n, rev, err := s.getNamed(ctx, name)
	if err != nil {
		return false, fmt.Errorf("%s schedule %s: %w", verb, name, err)
	}
	if n.Paused == pause {
		return false, nil
	}
	n.Paused, n.PausedBy, n.PausedAt = pause, "", time.Time{}
	if pause {
		n.PausedBy, n.PausedAt = by, time.Now().UTC()
	}
	b, _ := json.Marshal(n)
	if _, err := s.kv.Update(ctx, namedPrefix+name, b, rev); err != nil {
		return false, fmt.Errorf("%s schedule %s: it changed meanwhile, try again: %w", verb, name, err)
	}
	return true, nil
}

// ListNamed returns the named schedules by name, with their next tick after now (none while
// paused: a paused schedule fires no tick) and the last tick the hosts published.
func (s *Store) ListNamed(ctx context.Context, now time.Time) ([]Named, error) {
	lister, err := s.kv.ListKeys(ctx, jetstream.MetaOnly())
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	var out []Named
	for key := range lister.Keys() {
		name, ok := strings.CutPrefix(key, namedPrefix)
		if !ok {
			continue
		}
		n, _, err := s.getNamed(ctx, name)
		if err != nil {
			continue // removed while listing
		}
		if sched, err := Parse(n.Schedule); err == nil && !n.Paused {
			n.Next = Next(sched, now)
		}
		if e, err := s.kv.Get(ctx, namedTickKey+name); err == nil {
			_ = n.LastTick.UnmarshalText(e.Value())
		}
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b Named) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// RecordNamedTick records the last tick a host published of a named schedule, for listings.
func (s *Store) RecordNamedTick(ctx context.Context, name string, tick time.Time) error {
	b, _ := tick.UTC().MarshalText()
	_, err := s.kv.Put(ctx, namedTickKey+name, b)
	return err
}

// WatchNamed calls set with every named schedule recorded and every change after (nil when
// removed), until ctx ends; it returns once the recorded ones were given.
func (s *Store) WatchNamed(ctx context.Context, set func(name string, n *Named)) error {
	w, err := s.kv.Watch(ctx, namedPrefix+">")
	if err != nil {
		return fmt.Errorf("watch named schedules: %w", err)
	}
	ready := make(chan struct{})
	go func() {
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					close(ready)
					continue
				}
				name := strings.TrimPrefix(e.Key(), namedPrefix)
				var n Named
				if e.Operation() != jetstream.KeyValuePut || json.Unmarshal(e.Value(), &n) != nil {
					set(name, nil)
					continue
				}
				set(name, &n)
			}
		}
	}()
	wait := time.NewTimer(30 * time.Second)
	defer wait.Stop()
	select {
	case <-ready:
		return nil
	case <-wait.C:
		return fmt.Errorf("read named schedules from bucket %s: no answer within 30s; check that NATS is reachable", Bucket)
	case <-ctx.Done():
		return fmt.Errorf("read named schedules: %w", ctx.Err())
	}
}
