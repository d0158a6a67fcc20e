// Package deploy keeps the functions as deployments in JetStream, so that every host serves
// one version of them (`host deploy`, `serve --deployed`). Two stores hold it:
//   - the object store agent_code: each function version once, content-addressed, under
//     <function>/<hash>, as a gzipped tar of its file or folder (Pack);
//   - the KeyValue bucket agent_deployments: d.<n> is deployment n (a Deployment as JSON:
//     which version of each function, who, when, why), and current names the one served.
//
// A deployment is stored by creating d.<n+1> (only one writer can) and then moving current
// from n to n+1 by compare-and-set: of two racing deploys one wins, the other is told and
// changes nothing. Old deployments are collected (Retention), and with them the versions no
// kept deployment names.
package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/functions"
)

const (
	// CodeBucket is the object store of function versions.
	CodeBucket = "agent_code"
	// Bucket is the KeyValue bucket of deployments.
	Bucket = "agent_deployments"
	// CurrentKey names the deployment the hosts serve.
	CurrentKey = "current"
	// MaxBytes bounds one deployment: its functions packed (gzipped tars) together. Code
	// larger than this belongs in a volume or a package, not in every host's data directory.
	MaxBytes = 64 << 20
	// codeBucketBytes bounds the object store: the kept deployments' distinct versions.
	codeBucketBytes = 1 << 30
)

// ErrRace is why a deploy that lost to another one changed nothing.
var ErrRace = errors.New("another deploy was stored at the same moment; nothing was changed: look at `host deployments`, then deploy again")

// ErrNotKept is why a deployment number cannot be read: "deployment <n> does not exist ...".
var ErrNotKept = errors.New("does not exist (never stored, or collected by the retention): `host deployments` lists the kept ones")

// ErrNone is what Current answers before the first deploy.
var ErrNone = errors.New("nothing is deployed yet: run `host deploy <dir>` first")

// Version is one function's code in a deployment.
//
//	hash    its content hash (functions.Function.Hash), the object <function>/<hash>
//	file    its file ("hello.py") or folder ("scrape/") as it lies in a functions directory
//	bytes   its packed size
type Version struct {
	Hash  string `json:"hash"`
	File  string `json:"file"`
	Bytes int64  `json:"bytes"`
}

// Deployment is one stored set of functions, d.<number> in the bucket.
type Deployment struct {
	Number    int                `json:"number"`
	At        time.Time          `json:"at"`
	By        string             `json:"by"`
	Message   string             `json:"message,omitempty"`
	Functions map[string]Version `json:"functions"`
	// Changed says what differs from the deployment before it: "+name" added, "-name"
	// removed, "~name" changed.
	Changed []string `json:"changed,omitempty"`
	// RollbackOf is the deployment this one restores (`host rollback`), 0 when none.
	RollbackOf int `json:"rollback_of,omitempty"`
}

// Store reads and writes deployments.
type Store struct {
	js   jetstream.JetStream
	kv   jetstream.KeyValue
	code jetstream.ObjectStore
	// now is the clock, for the retention; time.Now unless a test moves it.
	now func() time.Time
	// maxBytes bounds a deployment packed: MaxBytes unless a test lowers it.
	maxBytes int64
}

// Open makes the two stores, or keeps those there. replicas is as bus.Replicas takes it.
func Open(ctx context.Context, js jetstream.JetStream, replicas int) (*Store, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: Bucket, Description: "deployments: d.<n> is deployment n, current the one the hosts serve (host deploy)",
		History: 1, Replicas: bus.Replicas(ctx, js, "KV_"+Bucket, replicas),
	})
	if err != nil {
		return nil, fmt.Errorf("open the deployments bucket %s: %w", Bucket, err)
	}
	// An existing code store keeps its configuration: `serve --store-limit agent_code=<size>`
	// may have set its bound, which a deploy must not put back.
	code, err := js.ObjectStore(ctx, CodeBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) || err == nil && replicas > 0 {
		limit := int64(codeBucketBytes)
		if s, serr := js.Stream(ctx, "OBJ_"+CodeBucket); serr == nil {
			limit = s.CachedInfo().Config.MaxBytes
		}
		code, err = js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket: CodeBucket, Description: "function versions by content hash, <function>/<hash> (host deploy)",
			MaxBytes: limit, Storage: jetstream.FileStorage, Replicas: bus.Replicas(ctx, js, "OBJ_"+CodeBucket, replicas),
		})
	}
	if err != nil {
		return nil, fmt.Errorf("open the code store %s: %w", CodeBucket, err)
	}
	return &Store{js: js, kv: kv, code: code, now: time.Now, maxBytes: MaxBytes}, nil
}

// Attach opens the two stores without making them: a reader (the dashboard) of a host that has
// never deployed gets ErrNone instead of creating empty stores.
func Attach(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	kv, err := js.KeyValue(ctx, Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, ErrNone
	}
	if err != nil {
		return nil, fmt.Errorf("open the deployments bucket %s: %w", Bucket, err)
	}
	code, err := js.ObjectStore(ctx, CodeBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, ErrNone
	}
	if err != nil {
		return nil, fmt.Errorf("open the code store %s: %w", CodeBucket, err)
	}
	return &Store{js: js, kv: kv, code: code, now: time.Now, maxBytes: MaxBytes}, nil
}

func key(n int) string { return "d." + strconv.Itoa(n) }

func objectName(fn, hash string) string { return fn + "/" + hash }

// Current is the deployment the hosts serve; ErrNone before the first deploy.
func (s *Store) Current(ctx context.Context) (*Deployment, error) {
	n, _, err := s.current(ctx)
	if err != nil {
		return nil, err
	}
	return s.Get(ctx, n)
}

// current is the current deployment's number and the entry's revision; 0, 0, ErrNone when
// there is none.
func (s *Store) current(ctx context.Context) (int, uint64, error) {
	e, err := s.kv.Get(ctx, CurrentKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, 0, ErrNone
	}
	if err != nil {
		return 0, 0, fmt.Errorf("read the current deployment from %s: %w", Bucket, err)
	}
	n, err := strconv.Atoi(string(e.Value()))
	if err != nil {
		return 0, 0, fmt.Errorf("the current deployment in %s is %q, not a number: %w", Bucket, e.Value(), err)
	}
	return n, e.Revision(), nil
}

// Get reads deployment n; a missing one is an error naming the ones kept.
func (s *Store) Get(ctx context.Context, n int) (*Deployment, error) {
	e, err := s.kv.Get(ctx, key(n))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("deployment %d %w", n, ErrNotKept)
	}
	if err != nil {
		return nil, fmt.Errorf("read deployment %d: %w", n, err)
	}
	var d Deployment
	if err := json.Unmarshal(e.Value(), &d); err != nil {
		return nil, fmt.Errorf("deployment %d in %s is unreadable: %w", n, Bucket, err)
	}
	return &d, nil
}

// List is every kept deployment, oldest first.
func (s *Store) List(ctx context.Context) ([]*Deployment, error) {
	nums, err := s.numbers(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*Deployment, 0, len(nums))
	for _, n := range nums {
		d, err := s.Get(ctx, n)
		if err != nil {
			continue // collected meanwhile
		}
		out = append(out, d)
	}
	return out, nil
}

func (s *Store) numbers(ctx context.Context) ([]int, error) {
	lister, err := s.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list deployments in %s: %w", Bucket, err)
	}
	var nums []int
	for k := range lister.Keys() {
		if rest, ok := strings.CutPrefix(k, "d."); ok {
			if n, err := strconv.Atoi(rest); err == nil {
				nums = append(nums, n)
			}
		}
	}
	slices.Sort(nums)
	return nums, nil
}

// Request is what a deploy stores: the functions (checked by the caller, as `host check`
// checks them), who deploys and why.
type Request struct {
	Functions map[string]*functions.Function
	By        string
	Message   string
	// Base, when not 0, is the deployment the caller took the other functions from (the
	// dashboard's editor deploys one function with the rest of the current deployment): a
	// deploy when another one is current by then is refused with ErrRace, rather than store
	// a set that drops what that one changed.
	Base int
}

// Deploy stores the functions as the next deployment and makes it current. It returns the
// deployment and whether it is new: a set equal to the current one stores nothing and returns
// the current deployment with false. A deploy that lost a race returns ErrRace.
func (s *Store) Deploy(ctx context.Context, r Request) (*Deployment, bool, error) {
	packed := map[string][]byte{}
	versions := map[string]Version{}
	var total int64
	for name, f := range r.Functions {
		data, err := Pack(f)
		if err != nil {
			return nil, false, err
		}
		file := f.Entry
		if f.Folder {
			file = f.Name + "/"
		}
		packed[name] = data
		versions[name] = Version{Hash: f.Hash, File: file, Bytes: int64(len(data))}
		total += int64(len(data))
	}
	if total > s.maxBytes {
		return nil, false, fmt.Errorf("the deployment is %d bytes packed, over the limit of %d (%d MiB): keep data in volumes and dependencies in package.json or requirements.txt, not beside the code", total, s.maxBytes, s.maxBytes>>20)
	}
	return s.store(ctx, versions, r.By, r.Message, 0, r.Base, func(name string) ([]byte, error) { return packed[name], nil })
}

// Rollback stores a new deployment equal to deployment n.
func (s *Store) Rollback(ctx context.Context, n int, by string) (*Deployment, bool, error) {
	old, err := s.Get(ctx, n)
	if err != nil {
		return nil, false, err
	}
	for name, v := range old.Functions {
		if _, err := s.code.GetInfo(ctx, objectName(name, v.Hash)); err != nil {
			return nil, false, fmt.Errorf("deployment %d's version %s of %s is gone from %s (%v): it cannot be restored", n, v.Hash, name, CodeBucket, err)
		}
	}
	return s.store(ctx, old.Functions, by, fmt.Sprintf("rollback to %d", n), n, 0, nil)
}

// store puts the missing objects (pack yields them; nil when they all exist), creates d.<n+1>
// and moves current to it; base, when not 0, must be current.
func (s *Store) store(ctx context.Context, versions map[string]Version, by, msg string, rollbackOf, base int, pack func(string) ([]byte, error)) (*Deployment, bool, error) {
	n, rev, err := s.current(ctx)
	if base != 0 && err == nil && n != base {
		return nil, false, fmt.Errorf("deployment %d was stored after %d, which this deploy was made from: %w", n, base, ErrRace)
	}
	var prev *Deployment
	switch {
	case errors.Is(err, ErrNone):
	case err != nil:
		return nil, false, err
	default:
		if prev, err = s.Get(ctx, n); err != nil {
			return nil, false, err
		}
		if sameVersions(prev.Functions, versions) {
			return prev, false, nil
		}
	}
	if pack != nil {
		for name, v := range versions {
			if _, err := s.code.GetInfo(ctx, objectName(name, v.Hash)); err == nil {
				continue
			}
			data, err := pack(name)
			if err != nil {
				return nil, false, err
			}
			if _, err := s.code.PutBytes(ctx, objectName(name, v.Hash), data); err != nil {
				return nil, false, fmt.Errorf("store %s version %s in %s: %w", name, v.Hash, CodeBucket, err)
			}
		}
	}
	d := &Deployment{Number: n + 1, At: s.now().UTC(), By: by, Message: msg, Functions: versions, RollbackOf: rollbackOf}
	if prev != nil {
		d.Changed = changed(prev.Functions, versions)
	} else {
		d.Changed = changed(nil, versions)
	}
	doc, _ := json.Marshal(d)
	if _, err := s.kv.Create(ctx, key(d.Number), doc); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return nil, false, fmt.Errorf("deployment %d: %w", d.Number, ErrRace)
		}
		return nil, false, fmt.Errorf("store deployment %d in %s: %w", d.Number, Bucket, err)
	}
	val := []byte(strconv.Itoa(d.Number))
	if rev == 0 {
		_, err = s.kv.Create(ctx, CurrentKey, val)
	} else {
		_, err = s.kv.Update(ctx, CurrentKey, val, rev)
	}
	if err != nil {
		_ = s.kv.Purge(ctx, key(d.Number))
		if errors.Is(err, jetstream.ErrKeyExists) || strings.Contains(err.Error(), "wrong last sequence") {
			return nil, false, fmt.Errorf("deployment %d: %w", d.Number, ErrRace)
		}
		return nil, false, fmt.Errorf("make deployment %d current: %w", d.Number, err)
	}
	// The retention is kept by whoever deploys; a collection that fails is tried by the next.
	_, _, _ = s.Collect(ctx)
	return d, true, nil
}

func sameVersions(a, b map[string]Version) bool {
	return maps.EqualFunc(a, b, func(x, y Version) bool { return x.Hash == y.Hash && x.File == y.File })
}

// changed lists what differs from before to after: +added, -removed, ~changed, by name.
func changed(before, after map[string]Version) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(after)) {
		old, ok := before[name]
		switch {
		case !ok:
			out = append(out, "+"+name)
		case old.Hash != after[name].Hash || old.File != after[name].File:
			out = append(out, "~"+name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(before)) {
		if _, ok := after[name]; !ok {
			out = append(out, "-"+name)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return strings.Compare(a[1:], b[1:]) })
	return out
}

// Code reads a function version's packed code; a missing one is an error naming it.
func (s *Store) Code(ctx context.Context, fn, hash string) ([]byte, error) {
	data, err := s.code.GetBytes(ctx, objectName(fn, hash))
	if err != nil {
		return nil, fmt.Errorf("read version %s of %s from %s: %w", hash, fn, CodeBucket, err)
	}
	return data, nil
}

// Watch sends the current deployment's number each time it changes, the present one first
// (none before the first deploy), until ctx ends.
func (s *Store) Watch(ctx context.Context) (<-chan int, error) {
	w, err := s.kv.Watch(ctx, CurrentKey, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("watch %s in %s: %w", CurrentKey, Bucket, err)
	}
	out := make(chan int, 1)
	go func() {
		defer close(out)
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
					continue
				}
				n, err := strconv.Atoi(string(e.Value()))
				if err != nil {
					continue
				}
				select {
				case out <- n:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}
