package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/bus"
)

// Bucket is the KeyValue bucket of the schedules: under fn.<function> the expression and the
// last tick the hosts published, under paused.<function> who paused it and when. Pauses live
// there, not in a host, so they hold on every host of a cluster and across restarts.
const Bucket = "agent_schedules"

const (
	fnPrefix     = "fn."
	pausedPrefix = "paused."
)

// ErrNoSchedule is returned for a function no host has scheduled.
var ErrNoSchedule = errors.New("no host serves this function with a schedule: annotation")

// Pause says who paused a schedule and when.
type Pause struct {
	By string    `json:"by"`
	At time.Time `json:"at"`
}

// state is what the hosts record of a schedule.
type state struct {
	Schedule string    `json:"schedule"`
	LastTick time.Time `json:"last_tick,omitzero"`
}

// Entry is one schedule as `host schedules` lists it.
//
//	function   the scheduled function
//	schedule   its schedule: annotation
//	next       its next tick (when paused: the next tick it would fire)
//	last_tick  the last tick the hosts published (absent before the first)
//	paused     whether ticks are skipped; paused_by and paused_at say who paused it and when
type Entry struct {
	Function string    `json:"function"`
	Schedule string    `json:"schedule"`
	Next     time.Time `json:"next,omitzero"` // none while paused
	LastTick time.Time `json:"last_tick,omitzero"`
	Paused   bool      `json:"paused"`
	PausedBy string    `json:"paused_by,omitempty"`
	PausedAt time.Time `json:"paused_at,omitzero"`
}

// Store reads and writes the schedules bucket.
type Store struct {
	kv jetstream.KeyValue
}

// Open creates the bucket, or binds the one that exists; replicas as bus.Replicas decides.
func Open(ctx context.Context, js jetstream.JetStream, replicas int) (*Store, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: Bucket, Description: "schedules: last ticks and pauses", History: 1,
		Replicas: bus.Replicas(ctx, js, "KV_"+Bucket, replicas),
	})
	if err != nil {
		return nil, fmt.Errorf("open the schedules bucket %s: %w", Bucket, err)
	}
	return &Store{kv: kv}, nil
}

// Bind binds the bucket a host created.
func Bind(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	kv, err := js.KeyValue(ctx, Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("no host has recorded schedules (bucket %s not found): is `host serve` running against this NATS?", Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("open the schedules bucket %s: %w", Bucket, err)
	}
	return &Store{kv: kv}, nil
}

// Pause makes every host skip function's ticks until Resume.
func (s *Store) Pause(ctx context.Context, function, by string) error {
	if _, err := s.kv.Get(ctx, fnPrefix+function); errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("pause %s: %w; list schedules with `host schedules`", function, ErrNoSchedule)
	} else if err != nil {
		return fmt.Errorf("pause %s: read its schedule: %w", function, err)
	}
	b, _ := json.Marshal(Pause{By: by, At: time.Now().UTC()})
	if _, err := s.kv.Put(ctx, pausedPrefix+function, b); err != nil {
		return fmt.Errorf("pause %s: %w", function, err)
	}
	return nil
}

// Resume lets function's ticks fire again; it reports whether the schedule was paused.
func (s *Store) Resume(ctx context.Context, function string) (bool, error) {
	if _, err := s.kv.Get(ctx, pausedPrefix+function); errors.Is(err, jetstream.ErrKeyNotFound) {
		if _, err := s.kv.Get(ctx, fnPrefix+function); errors.Is(err, jetstream.ErrKeyNotFound) {
			return false, fmt.Errorf("resume %s: %w; list schedules with `host schedules`", function, ErrNoSchedule)
		}
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("resume %s: %w", function, err)
	}
	if err := s.kv.Delete(ctx, pausedPrefix+function); err != nil {
		return false, fmt.Errorf("resume %s: %w", function, err)
	}
	return true, nil
}

// List returns the schedules by function name, with their next tick after now. keep, when not
// nil, says which functions to list: a schedule stays recorded after its function is removed.
func (s *Store) List(ctx context.Context, now time.Time, keep func(function string) bool) ([]Entry, error) {
	lister, err := s.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	var out []Entry
	for key := range lister.Keys() {
		fn, ok := strings.CutPrefix(key, fnPrefix)
		if !ok || (keep != nil && !keep(fn)) {
			continue
		}
		var st state
		if e, err := s.kv.Get(ctx, key); err != nil || json.Unmarshal(e.Value(), &st) != nil {
			continue // removed while listing, or not ours
		}
		entry := Entry{Function: fn, Schedule: st.Schedule, LastTick: st.LastTick}
		if e, err := s.kv.Get(ctx, pausedPrefix+fn); err == nil {
			var p Pause
			json.Unmarshal(e.Value(), &p)
			entry.Paused, entry.PausedBy, entry.PausedAt = true, p.By, p.At
		}
		// A paused schedule has no next tick: it fires again only once resumed, on the tick
		// after that.
		if sched, err := Parse(st.Schedule); err == nil && !entry.Paused {
			entry.Next = Next(sched, now)
		}
		out = append(out, entry)
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Function, b.Function) })
	return out, nil
}

// record writes a schedule's expression, and its last tick when tick is not zero; a zero tick
// keeps the one recorded.
func (s *Store) record(ctx context.Context, function, expr string, tick time.Time) error {
	st := state{Schedule: expr, LastTick: tick}
	if tick.IsZero() {
		if e, err := s.kv.Get(ctx, fnPrefix+function); err == nil {
			var old state
			if json.Unmarshal(e.Value(), &old) == nil {
				st.LastTick = old.LastTick
			}
		}
	}
	b, _ := json.Marshal(st)
	_, err := s.kv.Put(ctx, fnPrefix+function, b)
	return err
}

// watchPauses calls set for every pause recorded and every change after; ready is closed once
// the recorded ones were given.
func (s *Store) watchPauses(ctx context.Context, set func(function string, p *Pause), ready chan<- struct{}) error {
	w, err := s.kv.Watch(ctx, pausedPrefix+">")
	if err != nil {
		return fmt.Errorf("watch schedule pauses: %w", err)
	}
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
				if e == nil { // every recorded pause was given
					close(ready)
					continue
				}
				fn := strings.TrimPrefix(e.Key(), pausedPrefix)
				if e.Operation() != jetstream.KeyValuePut {
					set(fn, nil)
					continue
				}
				var p Pause
				json.Unmarshal(e.Value(), &p)
				set(fn, &p)
			}
		}
	}()
	return nil
}
