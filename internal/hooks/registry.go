package hooks

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
	"github.com/agenthost/host/internal/secrets"
)

// SourcesBucket holds the webhook sources added with `host hooks add`, keyed by source name;
// every host watches it, so a source added or removed there takes effect on every host without
// a restart. It holds a source's authentication and the name of its key, never a key's value
// (those stay sealed in the webhook key store).
const SourcesBucket = "agent_hooks"

// DeliveriesBucket keeps, per source, its last deliveries (Delivery), newest first.
const DeliveriesBucket = "agent_hook_deliveries"

// KeepDeliveries is how many deliveries per source DeliveriesBucket keeps.
const KeepDeliveries = 20

// Entry is a source as SourcesBucket stores it.
type Entry struct {
	Name string `json:"name"`
	Auth Auth   `json:"auth"`
	// Key names the webhook key (hmac, bearer); "" for open.
	Key     string    `json:"key,omitempty"`
	AddedBy string    `json:"added_by,omitempty"`
	Added   time.Time `json:"added"`
}

// Source is the entry as a declared source.
func (e Entry) Source() Source { return Source{Name: e.Name, Auth: e.Auth, Secret: e.Key} }

// Delivery is one delivery to a source that reached its authentication.
type Delivery struct {
	At time.Time `json:"at"`
	// ID is the delivery id the 202 answered with, which is also the flow id of every job the
	// delivery started; "" when it was refused.
	ID     string `json:"id,omitempty"`
	Status int    `json:"status"`
	// Error says why a refused delivery was refused.
	Error     string `json:"error,omitempty"`
	Duplicate bool   `json:"duplicate,omitempty"`
	Host      string `json:"host,omitempty"`
}

// NewSource checks a source as `host hooks add <source> <auth> [--key K]` gives it.
func NewSource(name string, auth Auth, key string) (Source, error) {
	if !sourceName.MatchString(name) {
		return Source{}, fmt.Errorf("webhook source %q: a name is 1 to 64 letters, digits, - and _", name)
	}
	switch auth {
	case HMAC, Bearer:
		if key == "" {
			return Source{}, fmt.Errorf("webhook source %q: %s needs --key, the name of a webhook key (set it with host secrets set --hook <key> '\"<value>\"'), e.g. --key %s-key", name, auth, name)
		}
		if err := secrets.ValidateName(key); err != nil {
			return Source{}, fmt.Errorf("webhook source %q: --key: %w", name, err)
		}
	case Open:
		if key != "" {
			return Source{}, fmt.Errorf("webhook source %q: open takes no --key", name)
		}
	default:
		return Source{}, fmt.Errorf("webhook source %q: unknown authentication %q (use hmac, bearer or open)", name, auth)
	}
	return Source{Name: name, Auth: auth, Secret: key}, nil
}

// Registry reads and writes SourcesBucket and DeliveriesBucket, for the CLI, the dashboard and
// the hosts.
type Registry struct {
	sources, deliveries jetstream.KeyValue
}

// OpenRegistry creates the buckets when missing (a host calls it at start).
func OpenRegistry(ctx context.Context, js jetstream.JetStream, replicas int) (*Registry, error) {
	r := &Registry{}
	var err error
	if r.sources, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: SourcesBucket,
		Description: "webhook sources added with host hooks add (names of keys, never their values)", History: 1,
		Storage: jetstream.FileStorage, Replicas: bus.Replicas(ctx, js, "KV_"+SourcesBucket, replicas)}); err != nil {
		return nil, fmt.Errorf("open webhook source bucket %s: %w", SourcesBucket, err)
	}
	if r.deliveries, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: DeliveriesBucket,
		Description: "the last deliveries of each webhook source", History: 1,
		Storage: jetstream.FileStorage, Replicas: bus.Replicas(ctx, js, "KV_"+DeliveriesBucket, replicas)}); err != nil {
		return nil, fmt.Errorf("open webhook delivery bucket %s: %w", DeliveriesBucket, err)
	}
	return r, nil
}

// BindRegistry attaches to the existing buckets, for the CLI and the dashboard.
func BindRegistry(ctx context.Context, js jetstream.JetStream) (*Registry, error) {
	r := &Registry{}
	var err error
	for _, b := range []struct {
		name string
		kv   *jetstream.KeyValue
	}{{SourcesBucket, &r.sources}, {DeliveriesBucket, &r.deliveries}} {
		if *b.kv, err = js.KeyValue(ctx, b.name); err != nil {
			if errors.Is(err, jetstream.ErrBucketNotFound) {
				return nil, fmt.Errorf("webhook bucket %s not found: has a host (`host serve`) of this version ever run against this NATS?", b.name)
			}
			return nil, fmt.Errorf("open webhook bucket %s: %w", b.name, err)
		}
	}
	return r, nil
}

// Add stores src; replaced says it overwrote a source of the same name.
func (r *Registry) Add(ctx context.Context, src Source, by string) (replaced bool, err error) {
	if src, err = NewSource(src.Name, src.Auth, src.Secret); err != nil {
		return false, err
	}
	b, err := json.Marshal(Entry{Name: src.Name, Auth: src.Auth, Key: src.Secret, AddedBy: by, Added: time.Now().UTC()})
	if err != nil {
		return false, err
	}
	if _, err := r.sources.Create(ctx, src.Name, b); err != nil {
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return false, fmt.Errorf("add webhook source %q to bucket %s: %w", src.Name, SourcesBucket, err)
		}
		if _, err := r.sources.Put(ctx, src.Name, b); err != nil {
			return false, fmt.Errorf("replace webhook source %q in bucket %s: %w", src.Name, SourcesBucket, err)
		}
		return true, nil
	}
	return false, nil
}

// Detail is what the audit entry of a source's addition says of it, from the CLI or the
// dashboard.
func Detail(src Source, replaced bool) string {
	detail := fmt.Sprintf("auth %s", src.Auth)
	if src.Secret != "" {
		detail += ", key " + src.Secret
	}
	if replaced {
		detail += "; replaced the source of that name"
	}
	return detail
}

// ErrNoSource is wrapped by the error for a source the bucket does not hold.
var ErrNoSource = errors.New("no such webhook source")

// Remove deletes a source from the bucket; its deliveries' history goes with it.
func (r *Registry) Remove(ctx context.Context, name string) error {
	if _, err := r.sources.Get(ctx, name); err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) || errors.Is(err, jetstream.ErrInvalidKey) {
			return fmt.Errorf("remove webhook source %q: %w in bucket %s (see host hooks ls; a source declared by serve --hook goes only with the flag)",
				name, ErrNoSource, SourcesBucket)
		}
		return fmt.Errorf("remove webhook source %q: %w", name, err)
	}
	if err := r.sources.Purge(ctx, name); err != nil {
		return fmt.Errorf("remove webhook source %q from bucket %s: %w", name, SourcesBucket, err)
	}
	if err := r.purgeDeliveries(ctx, name); err != nil {
		return fmt.Errorf("remove the deliveries of webhook source %q: %w", name, err)
	}
	return nil
}

// purgeDeliveries drops a source's delivery history, if it has one.
func (r *Registry) purgeDeliveries(ctx context.Context, name string) error {
	if err := r.deliveries.Purge(ctx, name); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return err
	}
	return nil
}

// List returns the bucket's sources, sorted by name.
func (r *Registry) List(ctx context.Context) ([]Entry, error) {
	keys, err := r.sources.Keys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return []Entry{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list webhook sources in bucket %s: %w", SourcesBucket, err)
	}
	out := make([]Entry, 0, len(keys))
	for _, k := range keys {
		e, err := r.sources.Get(ctx, k)
		if err != nil {
			if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
				continue // removed meanwhile
			}
			return nil, fmt.Errorf("read webhook source %q: %w", k, err)
		}
		var en Entry
		if err := json.Unmarshal(e.Value(), &en); err != nil {
			return nil, fmt.Errorf("webhook source %q in bucket %s is not a source entry: %w", k, SourcesBucket, err)
		}
		out = append(out, en)
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Deliveries returns a source's last deliveries, newest first.
func (r *Registry) Deliveries(ctx context.Context, source string) ([]Delivery, error) {
	e, err := r.deliveries.Get(ctx, source)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			return []Delivery{}, nil
		}
		return nil, fmt.Errorf("read the deliveries of webhook source %q: %w", source, err)
	}
	var ds []Delivery
	if err := json.Unmarshal(e.Value(), &ds); err != nil {
		return nil, fmt.Errorf("the deliveries of webhook source %q are not a delivery list: %w", source, err)
	}
	return ds, nil
}

// record puts d first in the source's ring, with a compare-and-set so that two hosts taking
// deliveries at once both keep theirs.
func (r *Registry) record(ctx context.Context, source string, d Delivery) error {
	for range 10 {
		var ds []Delivery
		var rev uint64
		e, err := r.deliveries.Get(ctx, source)
		switch {
		case err == nil:
			rev = e.Revision()
			_ = json.Unmarshal(e.Value(), &ds) // a garbled ring starts again
		case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
		default:
			return fmt.Errorf("read the deliveries of webhook source %q: %w", source, err)
		}
		ds = append([]Delivery{d}, ds...)
		if len(ds) > KeepDeliveries {
			ds = ds[:KeepDeliveries]
		}
		b, _ := json.Marshal(ds)
		if rev == 0 {
			_, err = r.deliveries.Create(ctx, source, b)
		} else {
			_, err = r.deliveries.Update(ctx, source, b, rev)
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongSequence(err) {
			return fmt.Errorf("record a delivery of webhook source %q: %w", source, err)
		}
	}
	return fmt.Errorf("record a delivery of webhook source %q: too many concurrent writers", source)
}

func isWrongSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// watch follows the sources bucket: apply is called with every entry as it is now (the initial
// values first, then every change: a nil entry for a removal) until ctx ends; watch returns
// once the initial values are applied.
func (r *Registry) watch(ctx context.Context, apply func(name string, e *Entry, err error)) error {
	w, err := r.sources.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watch webhook source bucket %s: %w", SourcesBucket, err)
	}
	initial := make(chan struct{})
	go func() {
		defer w.Stop()
		loaded := false
		for u := range w.Updates() {
			if u == nil {
				if !loaded {
					loaded = true
					close(initial)
				}
				continue
			}
			switch u.Operation() {
			case jetstream.KeyValueDelete, jetstream.KeyValuePurge:
				apply(u.Key(), nil, nil)
			default:
				var e Entry
				if err := json.Unmarshal(u.Value(), &e); err != nil {
					apply(u.Key(), nil, fmt.Errorf("not a source entry: %w", err))
					continue
				}
				apply(u.Key(), &e, nil)
			}
		}
		if !loaded {
			close(initial)
		}
	}()
	select {
	case <-initial:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
