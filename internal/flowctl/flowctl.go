// Package flowctl holds the state of flow control across every host on one NATS: the runs
// holding each key of a function's `limit:`, the starts of each key of its `rate:` and the
// newest message of each key of its `debounce:`, in one
// JetStream KeyValue bucket, every change a compare-and-set on the revision read (so two hosts
// taking the last room at once cannot both have it).
//
// A limit's holders are leases: each names its job and how long it holds (Until). The host
// running the job renews it every third of the lease; a holder past its Until is dropped by
// the next host that reads the entry, so a host killed while it held a key frees the key within
// one lease (DefaultLease) without anyone noticing its death. A key whose last holder releases
// it is deleted, and the bucket's TTL (BucketTTL) removes whatever a dead host left, so keys
// with many distinct values cost one entry per key in use (a limit) or started within its
// period (a rate), never more.
package flowctl

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/bus"
)

// Bucket is the KeyValue bucket of flow-control state.
const Bucket = "agent_flow_control"

// BucketTTL is how long an entry nobody writes is kept: past the longest rate period (24h), so
// a rate's starts are kept as long as they count, and bounding what a dead host's holders or
// a key never used again cost.
const BucketTTL = 25 * time.Hour

// DefaultLease is how long a limit's holder holds its key without renewing it: the most a key
// stays taken after its host died.
const DefaultLease = 30 * time.Second

// casTries bounds one change's attempts while other hosts write the same key.
const casTries = 100

// Store is the bucket.
type Store struct {
	kv  jetstream.KeyValue
	now func() time.Time
}

// Open creates or updates the bucket.
func Open(ctx context.Context, js jetstream.JetStream, replicas int) (*Store, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      Bucket,
		Description: "flow control: the runs holding each limit: key, the starts of each rate: key",
		History:     1,
		TTL:         BucketTTL,
		Replicas:    bus.Replicas(ctx, js, "KV_"+Bucket, replicas),
	})
	if err != nil {
		return nil, fmt.Errorf("open flow-control bucket %s: %w", Bucket, err)
	}
	return &Store{kv: kv, now: time.Now}, nil
}

// Holder is one run holding a limit's key.
type Holder struct {
	Host  string    `json:"host"`
	Until time.Time `json:"until"`
}

// entry is one key's state.
type entry struct {
	// Key is the key's value as the expression gave it, for people reading the bucket.
	Key string `json:"key,omitempty"`
	// Holders are a limit's runs, by job id.
	Holders map[string]Holder `json:"holders,omitempty"`
	// Starts are a rate's starts within its period, Unix nanoseconds, oldest first.
	Starts []int64 `json:"starts,omitempty"`
	// Newest is a debounce's newest message seen: its job id, stream sequence and publish
	// time (Unix ns); Touched is when the entry was last written (Unix ns).
	Newest  string `json:"newest,omitempty"`
	Seq     uint64 `json:"seq,omitempty"`
	At      int64  `json:"at,omitempty"`
	Touched int64  `json:"touched,omitempty"`
	// Levels are a function's priority levels with messages waiting, by level.
	Levels map[string]Level `json:"levels,omitempty"`
}

// name is the bucket key of a function's limit or rate key: the value hashed, since it may
// hold any character and any length, and KeyValue keys may not.
func name(kind, function, key string) string {
	sum := sha256.Sum256([]byte(key))
	return kind + "." + function + "." + hex.EncodeToString(sum[:16])
}

// read is an entry and the revision a change of it names (0: none).
func (s *Store) read(ctx context.Context, key string) (entry, uint64, error) {
	var e entry
	kve, err := s.kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return e, 0, nil
	case err != nil:
		return e, 0, fmt.Errorf("read flow-control key %s: %w", key, err)
	}
	if err := json.Unmarshal(kve.Value(), &e); err != nil {
		// A garbled entry would hold its key for ever: it is written over.
		return entry{}, kve.Revision(), nil
	}
	return e, kve.Revision(), nil
}

// write puts e at key if it is still at rev; false when someone wrote it meanwhile. An entry
// with nothing left is deleted.
func (s *Store) write(ctx context.Context, key string, e entry, rev uint64) (bool, error) {
	var err error
	switch {
	case len(e.Holders) == 0 && len(e.Starts) == 0 && e.Newest == "" && len(e.Levels) == 0:
		if rev == 0 {
			return true, nil
		}
		err = s.kv.Delete(ctx, key, jetstream.LastRevision(rev))
	case rev == 0:
		b, _ := json.Marshal(e)
		_, err = s.kv.Create(ctx, key, b)
	default:
		b, _ := json.Marshal(e)
		_, err = s.kv.Update(ctx, key, b, rev)
	}
	if err == nil {
		return true, nil
	}
	if errors.Is(err, jetstream.ErrKeyExists) || conflict(err) {
		return false, nil
	}
	return false, fmt.Errorf("write flow-control key %s: %w", key, err)
}

func conflict(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// change applies f to key's entry by compare-and-set until it sticks; f returns whether to
// write at all.
func (s *Store) change(ctx context.Context, key string, f func(e *entry) bool) error {
	for range casTries {
		e, rev, err := s.read(ctx, key)
		if err != nil {
			return err
		}
		if !f(&e) {
			return nil
		}
		ok, err := s.write(ctx, key, e, rev)
		if err != nil || ok {
			return err
		}
	}
	return fmt.Errorf("flow-control key %s changed %d times while this host wrote it; try again", key, casTries)
}
