// Package objstore keeps the persistent volumes of jobs: directories that are synced from a
// store into a job before it runs and back after it succeeds.
//
// Content lives in a Backend (the JetStream Object Store, or any S3 store) as immutable,
// content-addressed objects: blobs at volumes/<name>/blobs/<sha256> and one manifest per
// version at volumes/<name>/manifests/<version>-<sha256>.json. The mutable state, which
// version is current, is one NATS KeyValue entry per volume (bucket agent_volume_heads),
// changed by compare-and-set. A commit uploads what is missing, writes the manifest, then
// moves the head in that one atomic step: readers see the old version or the new one, and a
// host that dies before the last step leaves the old one whole.
//
// The store alone can also restore every volume, should NATS lose its data: each commit writes
// a head marker, heads/<name>/<version>-<manifest sha256>.json, holding the head it is about to
// make (the version and the kept history). Markers have a prefix of their own so that one
// listing finds every volume and its versions without reading a blob. The order is what makes a
// marker trustworthy. It is written after every blob of its version (a marker never names
// content that is not yet stored), alongside the manifest (a marker whose manifest is missing
// is passed over, so those two need no order between them), and before the head moves (a
// version NATS calls current always has its marker, so no committed version is lost). A host
// that dies before the marker leaves blobs and perhaps a manifest, but nothing that names them
// as a head: that interrupted version is never recovered. One that dies between the marker and
// the head leaves the store one version ahead of NATS: a whole version, every byte of it
// written, whose job will run again, so recovering it is the at-least-once side of a commit,
// never a mix of files. Recover (recover.go) reads the newest marker of each volume, checks its
// manifest and blobs, and creates the heads NATS lacks, never moving one NATS has.
//
// One run holds a volume at a time through a lease: an entry in the KeyValue bucket
// agent_volume_leases, whose age limit (the lease TTL) is measured by the NATS server alone,
// so hosts' clocks need not agree. The holder renews it; others wait.
//
// Files move by content hash: a host keeps a bounded local cache of blobs and downloads only
// those it lacks, and a commit uploads only content the volume does not have yet.
package objstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/agenthost/host/internal/bus"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// KeyValue buckets holding the mutable state, the same for both backends.
const (
	HeadsBucket  = "agent_volume_heads"
	LeasesBucket = "agent_volume_leases"
)

// Defaults for zero Options fields.
const (
	DefaultCacheBytes   = 1 << 30
	DefaultMaxBytes     = 1 << 30
	DefaultMaxFiles     = 100000
	DefaultKeepVersions = 10
	DefaultLeaseTTL     = 30 * time.Second
	DefaultRetryFor     = 30 * time.Second
)

// Options configure Volumes. Zero values take the defaults above.
type Options struct {
	CacheDir     string        // local blob cache; required by Mount
	CacheBytes   int64         // default 1 GiB
	MaxBytes     int64         // per volume; default 1 GiB
	MaxFiles     int           // per volume: files, directories and symlinks; default 100000
	KeepVersions int           // default 10
	LeaseTTL     time.Duration // default 30s; every host must use the same
	RetryFor     time.Duration // default 30s
	Owner        *Owner        // chown synced-in files, nil = leave as the host user
	Replicas     int           // of the KeyValue buckets; 0 keeps what exists (1 for new ones)
	Log          *zap.Logger
	Registerer   prometheus.Registerer // may be nil
}

// Owner is who synced-in files belong to: the unprivileged user a jailed job runs as, which
// must be able to change its volume.
type Owner struct{ UID, GID int }

// Volumes syncs volumes between a Backend and job directories.
type Volumes struct {
	b      Backend
	opts   Options
	log    *zap.Logger
	heads  jetstream.KeyValue
	leases jetstream.KeyValue
	staged jetstream.KeyValue // staged versions awaiting a decision (stage.go)
	cache  *cache             // nil without CacheDir
	m      *volumeMetrics
	host   string

	// ioWorkers bounds concurrent transfers per sync; hashWorkers concurrent hashing.
	ioWorkers, hashWorkers int
}

// New opens (creating if needed) the KeyValue buckets and the local cache.
func New(ctx context.Context, js jetstream.JetStream, b Backend, o Options) (*Volumes, error) {
	if o.CacheBytes <= 0 {
		o.CacheBytes = DefaultCacheBytes
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxFiles <= 0 {
		o.MaxFiles = DefaultMaxFiles
	}
	if o.KeepVersions <= 0 {
		o.KeepVersions = DefaultKeepVersions
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.RetryFor <= 0 {
		o.RetryFor = DefaultRetryFor
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	v := &Volumes{b: b, opts: o, log: o.Log, ioWorkers: 4, hashWorkers: max(2, runtime.GOMAXPROCS(0))}
	v.host, _ = os.Hostname()
	v.m = newMetrics(o.Registerer)
	var err error
	v.heads, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      HeadsBucket,
		Description: "current version and kept history of each volume",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    bus.Replicas(ctx, js, "KV_"+HeadsBucket, o.Replicas),
	})
	if err != nil {
		return nil, fmt.Errorf("open KeyValue bucket %s: %w (check that NATS is reachable and has JetStream enabled)", HeadsBucket, err)
	}
	v.leases, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      LeasesBucket,
		Description: "which run holds each volume; entries expire unless renewed",
		History:     1,
		TTL:         o.LeaseTTL,
		Storage:     jetstream.FileStorage,
		Replicas:    bus.Replicas(ctx, js, "KV_"+LeasesBucket, o.Replicas),
	})
	if err != nil {
		return nil, fmt.Errorf("open KeyValue bucket %s: %w (check that NATS is reachable and has JetStream enabled)", LeasesBucket, err)
	}
	v.staged, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      StagedBucket,
		Description: "staged versions of volumes, awaiting an approval's decision",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    bus.Replicas(ctx, js, "KV_"+StagedBucket, o.Replicas),
	})
	if err != nil {
		return nil, fmt.Errorf("open KeyValue bucket %s: %w (check that NATS is reachable and has JetStream enabled)", StagedBucket, err)
	}
	if o.CacheDir != "" {
		if v.cache, err = openCache(o.CacheDir, o.CacheBytes, v.log, v.m.cacheBytes); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// readHead returns a volume's head and its revision, or nil and 0 if it has none.
func (v *Volumes) readHead(ctx context.Context, name string) (*head, uint64, error) {
	var e jetstream.KeyValueEntry
	err := v.kvCall(ctx, "read head of volume", HeadsBucket, name, func() error {
		var err error
		e, err = v.heads.Get(ctx, kvKey(name))
		return err
	})
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read head of volume %s: %w", name, err)
	}
	var h head
	if err := json.Unmarshal(e.Value(), &h); err != nil {
		return nil, 0, fmt.Errorf("decode head of volume %s (KeyValue %s, revision %d): %w: %w", name, HeadsBucket, e.Revision(), err, ErrCorrupt)
	}
	return &h, e.Revision(), nil
}

// writeHead replaces the head at revision rev (0: create it) and returns the new revision.
// A write that timed out may still have landed; the retry then fails its compare-and-set, so
// a mismatch is checked against what is stored before it is reported.
func (v *Volumes) writeHead(ctx context.Context, name string, h *head, rev uint64) (uint64, error) {
	data, err := json.Marshal(h)
	if err != nil {
		return 0, fmt.Errorf("encode head of volume %s: %w", name, err)
	}
	key := kvKey(name)
	var newRev uint64
	attempts := 0
	err = v.kvCall(ctx, "update head of volume", HeadsBucket, name, func() error {
		attempts++
		var err error
		if rev == 0 {
			newRev, err = v.heads.Create(ctx, key, data)
		} else {
			newRev, err = v.heads.Update(ctx, key, data, rev)
		}
		if err != nil && attempts > 1 && (errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)) {
			if e, gerr := v.heads.Get(ctx, key); gerr == nil && string(e.Value()) == string(data) {
				newRev = e.Revision()
				return nil
			}
		}
		return err
	})
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, fmt.Errorf("update head of volume %s: it changed under this run's lease, so nothing was committed (another host may be running without the same lease bucket): %w", name, err)
	}
	if err != nil {
		return 0, fmt.Errorf("update head of volume %s: %w", name, err)
	}
	return newRev, nil
}

// loadManifest reads a version's manifest, from the cache when it is there (manifests are
// content-addressed, so a cached one is the one named), and validates it.
func (v *Volumes) loadManifest(ctx context.Context, name string, r versionRec) (*manifest, error) {
	key := manifestKey(name, r)
	var data []byte
	if v.cache != nil {
		if f := v.cache.open(r.Manifest); f != nil {
			data, _ = io.ReadAll(f)
			f.Close()
		}
	}
	if data == nil || sha256hex(data) != r.Manifest {
		data = nil
		err := v.storeCall(ctx, "read manifest", key, func() error {
			rc, err := v.b.Get(ctx, key)
			if err != nil {
				return err
			}
			defer rc.Close()
			data, err = io.ReadAll(rc)
			if err != nil {
				return err
			}
			if got := sha256hex(data); got != r.Manifest {
				return permanentError{fmt.Errorf("%w: %w", &hashMismatchError{want: r.Manifest, got: got}, ErrCorrupt)}
			}
			return nil
		})
		if errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("version %d of volume %s: its manifest is missing from the store: %w", r.Version, name, err)
		}
		if err != nil {
			return nil, err
		}
		if v.cache != nil {
			if f, _, err := v.cache.put(r.Manifest, bytes.NewReader(data)); err == nil {
				f.Close()
			}
		}
	}
	var m manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("decode manifest %s in %s: %w: %w", key, v.b.Name(), err, ErrCorrupt)
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("manifest %s in %s is unsafe or corrupt, refusing to use it: %w: %w", key, v.b.Name(), err, ErrCorrupt)
	}
	return &m, nil
}

// parallel runs fn(0..n-1) on up to workers goroutines and returns the first error, after
// which the remaining items are skipped.
func parallel(parent context.Context, workers, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		next  = make(chan int)
	)
	for range min(workers, n) {
		wg.Go(func() {
			for i := range next {
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first == nil {
		first = parent.Err()
	}
	return first
}

func sha256hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
