// Package join keeps what a joining function has gathered in each flow: which of the steps it
// awaits have delivered (every item of a map), and their results, in a JetStream KeyValue
// bucket, so that what was gathered survives a host's restart and is shared by every host.
// Every write is checked against the revision it read, so with several hosts exactly one
// completes a join (or fails it), and only that one starts the joined step.
package join

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/bus"
)

// Bucket holds the joins: a state per join and flow, and each gathered result under a key of
// its own (a result may be up to a NATS message; a state stays small).
const Bucket = "agent_joins"

// keep is how long a join's entries live: longer than any join-timeout: allows (7 days).
const keep = 8 * 24 * time.Hour

// casTries bounds one gather's attempts at the state while other hosts write it.
const casTries = 50

// Store is the joins bucket.
type Store struct {
	kv jetstream.KeyValue
}

// Open creates the bucket if needed.
func Open(ctx context.Context, js jetstream.JetStream, replicas int) (*Store, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      Bucket,
		Description: "what joining functions have gathered, per flow",
		TTL:         keep,
		Storage:     jetstream.FileStorage,
		Replicas:    bus.Replicas(ctx, js, "KV_"+Bucket, replicas),
	})
	if err != nil {
		return nil, fmt.Errorf("open join bucket %s: %w", Bucket, err)
	}
	return &Store{kv: kv}, nil
}

// Part is one message a joining function gathered: the result of one awaited step's job, or
// of one item of it when that step ran once per item of a map (Count items, this Index).
type Part struct {
	Function string
	Index    int
	Count    int // 0: not an item of a map
	Data     []byte
}

// State is what a join has gathered in one flow.
type State struct {
	Awaits   []string          `json:"awaits"`
	Got      map[string]*await `json:"got"`
	Deadline time.Time         `json:"deadline"`
	Armed    uint64            `json:"armed,omitempty"`  // its timeout trigger's stream sequence, once published
	Done     bool              `json:"done,omitempty"`   // every awaited step delivered: the joined step is started
	Failed   string            `json:"failed,omitempty"` // why it never will be
}

// await is what one awaited step has delivered.
type await struct {
	Count int   `json:"count,omitempty"` // the items of its map; 0: one result
	Items []int `json:"items,omitempty"` // the items delivered, sorted
	One   bool  `json:"one,omitempty"`   // its one result delivered
}

func (a *await) complete() bool {
	if a == nil {
		return false
	}
	if a.Count > 0 {
		return len(a.Items) == a.Count
	}
	return a.One
}

// Complete reports whether every awaited step has delivered.
func (s *State) Complete() bool {
	for _, fn := range s.Awaits {
		if !s.Got[fn].complete() {
			return false
		}
	}
	return true
}

// Missing says what has not come, for the join's error: "review, label (3 of 5 items)".
func (s *State) Missing() string {
	var out []string
	for _, fn := range s.Awaits {
		switch a := s.Got[fn]; {
		case a.complete():
		case a == nil:
			out = append(out, fn)
		case a.Count > 0:
			out = append(out, fmt.Sprintf("%s (%d of %d items)", fn, len(a.Items), a.Count))
		default:
			out = append(out, fn)
		}
	}
	return strings.Join(out, ", ")
}

func stateKey(join, flow string) string { return join + "." + flow }

func partKey(join, flow string, p Part) string {
	item := "one"
	if p.Count > 0 {
		item = strconv.Itoa(p.Index)
	}
	return join + "." + flow + ".part." + p.Function + "." + item
}

// Gathered is what Add did.
type Gathered struct {
	State State
	// Started says this call created the state: its caller arranges the join's timeout.
	Started bool
	// Completed says this call made the join complete: its caller starts the joined step.
	Completed bool
}

// Add gathers part for join in flow, which awaits the functions in awaits and gives up at
// deadline (used when this part starts the join). A part delivered again (a redelivered
// message) changes nothing. A join that is done or failed takes no more parts.
func (s *Store) Add(ctx context.Context, join, flow string, awaits []string, deadline time.Time, p Part) (Gathered, error) {
	if _, err := s.kv.Put(ctx, partKey(join, flow, p), p.Data); err != nil {
		return Gathered{}, fmt.Errorf("join %s of flow %s: keep the result of %s: %w", join, flow, p.Function, err)
	}
	return s.update(ctx, join, flow, awaits, deadline, func(st *State) bool {
		if st.Done || st.Failed != "" {
			return false
		}
		a := st.Got[p.Function]
		if a == nil {
			a = &await{}
			st.Got[p.Function] = a
		}
		switch {
		case p.Count > 0:
			if a.Count != 0 && a.Count != p.Count {
				st.Failed = fmt.Sprintf("%s delivered items of maps of %d and of %d items in one flow", p.Function, a.Count, p.Count)
				return true
			}
			a.Count = p.Count
			i, found := slices.BinarySearch(a.Items, p.Index)
			if found {
				return false
			}
			a.Items = slices.Insert(a.Items, i, p.Index)
		case a.One:
			return false
		default:
			a.One = true
		}
		if st.Complete() {
			st.Done = true
		}
		return true
	})
}

// Fail ends join in flow as failed for why, unless it is already done or failed; Completed
// then says this call failed it, and its caller starts the joined step so that it fails.
func (s *Store) Fail(ctx context.Context, join, flow string, awaits []string, deadline time.Time, why string) (Gathered, error) {
	return s.update(ctx, join, flow, awaits, deadline, func(st *State) bool {
		if st.Done || st.Failed != "" {
			return false
		}
		st.Failed = why
		return true
	})
}

// Arm notes that the timeout trigger of join in flow is published, at seq in its stream, so
// that completing the join can remove it.
func (s *Store) Arm(ctx context.Context, join, flow string, seq uint64) error {
	_, err := s.update(ctx, join, flow, nil, time.Time{}, func(st *State) bool {
		if st.Armed != 0 {
			return false
		}
		st.Armed = seq
		return true
	})
	return err
}

// Get reads the state of join in flow; ok is false when nothing was gathered.
func (s *Store) Get(ctx context.Context, join, flow string) (st State, ok bool, err error) {
	e, err := s.kv.Get(ctx, stateKey(join, flow))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return st, false, nil
	}
	if err != nil {
		return st, false, fmt.Errorf("join %s of flow %s: read its state: %w", join, flow, err)
	}
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		return st, false, fmt.Errorf("join %s of flow %s: decode its state: %w", join, flow, err)
	}
	return st, true, nil
}

// update applies change to the state of join in flow, creating it, over the revision it read;
// change says whether it changed anything. Completed is set when this call made it done or
// failed.
func (s *Store) update(ctx context.Context, join, flow string, awaits []string, deadline time.Time, change func(*State) bool) (Gathered, error) {
	key := stateKey(join, flow)
	for range casTries {
		var st State
		var rev uint64
		e, err := s.kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			st = State{Awaits: awaits, Got: map[string]*await{}, Deadline: deadline}
		case err != nil:
			return Gathered{}, fmt.Errorf("join %s of flow %s: read its state: %w", join, flow, err)
		default:
			if err := json.Unmarshal(e.Value(), &st); err != nil {
				return Gathered{}, fmt.Errorf("join %s of flow %s: decode its state: %w", join, flow, err)
			}
			if st.Got == nil {
				st.Got = map[string]*await{}
			}
			rev = e.Revision()
		}
		wasOver := st.Done || st.Failed != ""
		if !change(&st) {
			return Gathered{State: st}, nil
		}
		b, err := json.Marshal(st)
		if err != nil {
			return Gathered{}, fmt.Errorf("join %s of flow %s: encode its state: %w", join, flow, err)
		}
		if rev == 0 {
			_, err = s.kv.Create(ctx, key, b)
		} else {
			_, err = s.kv.Update(ctx, key, b, rev)
		}
		if err == nil {
			return Gathered{State: st, Started: rev == 0, Completed: !wasOver && (st.Done || st.Failed != "")}, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongSequence(err) {
			return Gathered{}, fmt.Errorf("join %s of flow %s: write its state: %w", join, flow, err)
		}
		// Another host gathered meanwhile: read what it wrote and apply this part to that.
	}
	return Gathered{}, fmt.Errorf("join %s of flow %s: its state kept changing under %d attempts; the message is handed back", join, flow, casTries)
}

func isWrongSequence(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// Payload is the joined step's arguments: one field per awaited step, its result, or the list
// of its items' results in item order.
func (s *Store) Payload(ctx context.Context, join, flow string, st State) ([]byte, error) {
	out := make(map[string]json.RawMessage, len(st.Awaits))
	get := func(p Part) (json.RawMessage, error) {
		e, err := s.kv.Get(ctx, partKey(join, flow, p))
		if err != nil {
			return nil, fmt.Errorf("join %s of flow %s: read the result of %s: %w", join, flow, p.Function, err)
		}
		v := json.RawMessage(e.Value())
		if !json.Valid(v) {
			v, _ = json.Marshal(string(e.Value())) // a bash step's text result
		}
		return v, nil
	}
	for _, fn := range st.Awaits {
		a := st.Got[fn]
		if a.Count == 0 {
			v, err := get(Part{Function: fn})
			if err != nil {
				return nil, err
			}
			out[fn] = v
			continue
		}
		items := make([]json.RawMessage, a.Count)
		for i := range a.Count {
			v, err := get(Part{Function: fn, Index: i, Count: a.Count})
			if err != nil {
				return nil, err
			}
			items[i] = v
		}
		b, err := json.Marshal(items)
		if err != nil {
			return nil, err
		}
		out[fn] = b
	}
	return json.Marshal(out)
}
