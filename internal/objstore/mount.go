package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/jailfs"
)

// SyncStats say what one sync moved. Files counts the entries (files, directories, symlinks)
// of the version synced; the other counts are content blobs, so a file whose content the host
// or the store already had moves nothing. Manifests are not counted.
type SyncStats struct {
	Files, FilesFetched, FilesUploaded int
	BytesFetched, BytesUploaded        int64
	Duration                           time.Duration
	// Warm says Mount reused this host's copy of the version from the last run (warm.go)
	// instead of copying it out of the cache.
	Warm bool
}

// CommitResult is what Commit did.
type CommitResult struct {
	Version      uint64 // the volume's version after the commit
	Changed      bool   // whether a new version was made
	FilesChanged int    // entries added, changed or removed
	Stats        SyncStats
}

// Mounted is a volume synced into a job directory, with its lease held until Release.
type Mounted struct {
	v    *Volumes
	name string
	// root is the job's tree and rel the volume's path in it: every access to the checkout
	// resolves rel beneath root anew, with no link followed (package jailfs), as the jail may
	// have changed anything in the tree since the last. ownRoot: Mount opened root itself.
	root    *jailfs.Dir
	rel     string
	ownRoot bool
	lease   *lease
	in      SyncStats

	mu       sync.Mutex
	version  uint64
	base     *manifest
	released bool
	// known are the stamps of the checkout's files (warm.go); committed says the directory
	// holds exactly the current version, so it can be kept warm for the next run.
	known     *stamps
	committed bool
}

// Mount is MountAt for a directory whose whole path the host controls (no jail can write
// above it): dir's parent is created if missing and opened as the root.
func (v *Volumes) Mount(ctx context.Context, name, dir, holder string) (*Mounted, error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, fmt.Errorf("mount volume %s into %s: %w", name, dir, err)
	}
	root, err := jailfs.Open(filepath.Dir(dir))
	if err != nil {
		return nil, fmt.Errorf("mount volume %s into %s: %w", name, dir, err)
	}
	m, err := v.MountAt(ctx, name, root, filepath.Base(dir), holder)
	if err != nil {
		root.Close()
		return nil, err
	}
	m.ownRoot = true
	return m, nil
}

// MountAt takes the lease of volume name for holder (a job id; waits while another holder has
// it), and syncs the current version into rel beneath root (a job's tree, which a jail may
// write), which must be an empty directory or not exist. A link anywhere on rel fails the
// mount with an error wrapping ErrCheckout. root must stay open until Release. On success the
// caller must call Release; on error the lease has already been released.
//
// A job that mounts several volumes must mount them in one fixed order (sorted by name) so
// that two jobs never wait for each other's leases.
func (v *Volumes) MountAt(ctx context.Context, name string, root *jailfs.Dir, rel, holder string) (*Mounted, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if v.cache == nil {
		return nil, errors.New("mount a volume: Options.CacheDir is empty; the host needs a local cache directory for volumes")
	}
	l, err := v.acquire(ctx, name, holder)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	m := &Mounted{v: v, name: name, root: root, rel: rel, lease: l, base: &manifest{Volume: name}}
	err = m.checkout(ctx)
	if err != nil {
		if rerr := l.release(ctx); rerr != nil {
			v.log.Warn("cannot release volume lease after a failed mount", zap.String("volume", name), zap.Error(rerr))
		}
		return nil, fmt.Errorf("mount volume %s at %s: %w", name, rel, err)
	}
	m.in.Duration = time.Since(start)
	v.log.Debug("mounted volume", zap.String("volume", name), zap.Uint64("version", m.version),
		zap.Int("files", m.in.Files), zap.Int("fetched", m.in.FilesFetched), zap.Int64("bytes_fetched", m.in.BytesFetched),
		zap.Duration("took", m.in.Duration))
	return m, nil
}

func (m *Mounted) checkout(ctx context.Context) error {
	v := m.v
	h, _, err := v.readHead(ctx, m.name)
	if err != nil {
		return err
	}
	if r, ok := h.current(); ok {
		if m.base, err = v.loadManifest(ctx, m.name, r); err != nil {
			return err
		}
		m.version = r.Version
	} else if h != nil && h.Version != 0 {
		return fmt.Errorf("head of volume %s names version %d, which its history lacks", m.name, h.Version)
	}
	if m.known = v.unstash(m.name, m.root, m.rel, m.base); m.known != nil {
		m.in = SyncStats{Files: len(m.base.Entries), Warm: true}
		return nil
	}
	vd, err := prepareDir(m.root, m.rel)
	if err != nil {
		return err
	}
	defer vd.Close()
	m.in, err = v.syncIn(ctx, m.name, vd, m.base)
	v.cache.evict()
	if err == nil {
		m.known, _ = takeStamps(vd, m.base.Entries) // without stamps every file is hashed
	}
	return err
}

// In returns what Mount moved.
func (m *Mounted) In() SyncStats { return m.in }

// Version returns the version checked out, or the one the last Commit made (0 = new volume).
func (m *Mounted) Version() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.version
}

// Commit scans dir and commits a new version if anything changed (Version unchanged and
// Changed=false otherwise). Only content the volume lacks is uploaded; the new version becomes
// visible in one atomic step at the end, so a failure anywhere before leaves the old version
// current and whole. It fails with ErrLimit when the directory exceeds MaxBytes or MaxFiles
// and with ErrLeaseLost when the run no longer holds the volume; nothing is committed then.
func (m *Mounted) Commit(ctx context.Context, jobID string) (CommitResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	res, err := m.commit(ctx, jobID)
	if err != nil {
		return CommitResult{Version: m.version}, fmt.Errorf("commit volume %s: %w", m.name, err)
	}
	return res, nil
}

func (m *Mounted) commit(ctx context.Context, jobID string) (CommitResult, error) {
	start := time.Now()
	p, res, err := m.prepare(ctx, false)
	if p == nil || err != nil {
		return res, err
	}
	defer p.vd.Close()
	v := m.v
	nm := &manifest{Volume: m.name, Version: p.h.Version + 1, Entries: p.entries}
	if err := v.publish(ctx, m.lease, m.name, p.h, p.rev, nm, p.rec(jobID), p.sweep); err != nil {
		return res, err
	}
	v.cache.evict()
	m.version, m.base = nm.Version, nm
	m.known, _ = takeStamps(p.vd, p.entries)
	m.committed = true
	res.Version, res.Changed = nm.Version, true
	res.Stats.Duration = time.Since(start)
	v.log.Info("committed volume", zap.String("volume", m.name), zap.Uint64("version", nm.Version), zap.String("job", jobID),
		zap.Int("files_changed", p.changed), zap.Int("uploaded", res.Stats.FilesUploaded), zap.Int64("bytes_uploaded", res.Stats.BytesUploaded))
	return res, nil
}

// pending is a commit (or a stage) with its content in the store: what is left is to write its
// manifest and, for a commit, to move the head.
type pending struct {
	vd           *jailfs.Dir
	entries      []entry
	total        int64
	changed      int
	changedBytes int64
	h            *head
	rev          uint64
	sweep        bool
}

// rec is the history record of the version p becomes.
func (p *pending) rec(jobID string) versionRec {
	return versionRec{Time: time.Now().UTC(), JobID: jobID, FilesChanged: p.changed, Bytes: p.changedBytes,
		Files: len(p.entries), TotalBytes: p.total}
}

// prepare scans the checkout and uploads the content the volume lacks, after flagging the head
// dirty (so that a failure later is swept). It returns nil (and the result) when nothing
// changed: the checkout is then the current version. The caller closes p.vd. staging counts
// the version about to be staged in the head (head.Staged) with the same write.
func (m *Mounted) prepare(ctx context.Context, staging bool) (*pending, CommitResult, error) {
	v := m.v
	if m.released {
		return nil, CommitResult{}, errors.New("the volume was already released")
	}
	if err := m.lease.check(); err != nil {
		return nil, CommitResult{}, fmt.Errorf("%w; nothing was committed", err)
	}
	start := time.Now()
	// Resolved again, not kept from the mount: what is committed is what the job left at the
	// volume's path, and a path the jail has since routed through a link is refused.
	vd, err := openCheckout(m.root, m.rel)
	if err != nil {
		return nil, CommitResult{}, err
	}
	p := &pending{vd: vd}
	ok := false
	defer func() {
		if !ok {
			vd.Close()
		}
	}()
	if p.entries, p.total, err = v.scan(ctx, m.name, vd, m.known); err != nil {
		return nil, CommitResult{}, err
	}
	p.changed, p.changedBytes = diff(m.base.Entries, p.entries)
	res := CommitResult{Version: m.version, FilesChanged: p.changed, Stats: SyncStats{Files: len(p.entries)}}
	if p.changed == 0 {
		m.known, _ = takeStamps(vd, p.entries)
		m.committed = true
		res.Stats.Duration = time.Since(start)
		return nil, res, nil
	}

	if p.h, p.rev, err = v.currentHead(ctx, m.name, m.version); err != nil {
		return nil, res, err
	}
	if p.h.Version != m.version {
		return nil, res, fmt.Errorf("the volume moved from version %d to %d while this run held its lease; nothing was committed", m.version, p.h.Version)
	}
	p.sweep = p.h.Dirty
	if p.rev, err = v.markDirty(ctx, m.name, p.h, p.rev, staging); err != nil {
		return nil, res, err
	}

	have := map[string]bool{emptyHash: true}
	for _, e := range m.base.Entries {
		have[e.Hash] = true
	}
	var upload []entry // one per new content
	for _, e := range p.entries {
		if e.Type == typeFile && !have[e.Hash] {
			have[e.Hash] = true
			upload = append(upload, e)
		}
	}
	sent := make([]int64, len(upload)) // -1 = the store had it already
	err = parallel(ctx, v.ioWorkers, len(upload), func(ctx context.Context, i int) error {
		var err error
		sent[i], err = v.upload(ctx, m.name, vd, upload[i])
		return err
	})
	if err != nil {
		return nil, res, fmt.Errorf("%w; nothing was committed, version %d is still current", err, m.version)
	}
	for _, n := range sent {
		if n >= 0 {
			res.Stats.FilesUploaded++
			res.Stats.BytesUploaded += n
		}
	}
	v.m.bytes.WithLabelValues("out").Add(float64(res.Stats.BytesUploaded))
	v.m.files.WithLabelValues("out").Add(float64(res.Stats.FilesUploaded))
	ok = true
	return p, res, nil
}

// diff counts the entries added, changed or removed between two sorted entry lists, and the
// bytes of the files added or changed.
func diff(old, cur []entry) (int, int64) {
	prev := make(map[string]entry, len(old))
	for _, e := range old {
		prev[e.Path] = e
	}
	n, b := 0, int64(0)
	for _, e := range cur {
		o, ok := prev[e.Path]
		if !ok || !o.same(e) {
			n++
			b += e.Size
		}
		delete(prev, e.Path)
	}
	return n + len(prev), b
}

// upload puts one file's content into the store unless it is there already (left by an
// earlier version still kept, or by a commit that failed later), copying it into the local
// cache on the way: the next Mount here then downloads nothing, and what is uploaded is
// exactly what was hashed even if the file changes meanwhile. It returns the bytes sent, or
// -1 when nothing was.
func (v *Volumes) upload(ctx context.Context, name string, vd *jailfs.Dir, e entry) (int64, error) {
	// Always from the job's file, never from a cache entry that may already exist: a damaged
	// cache file must not be uploaded under a hash it does not have. The copy is verified.
	p := e.Path
	src, _, err := vd.OpenRegular(e.Path)
	if err != nil {
		return 0, checkoutErr(fmt.Errorf("read %s: %w", p, err))
	}
	f, _, err := v.cache.put(e.Hash, src)
	src.Close()
	var bad *hashMismatchError
	if errors.As(err, &bad) {
		return 0, fmt.Errorf("file %s changed while the volume was being committed; nothing was committed", p)
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return 0, err
	}
	key := blobKey(name, e.Hash)
	var size int64
	err = v.storeCall(ctx, "check blob", key, func() error {
		var err error
		size, err = v.b.Stat(ctx, key)
		return err
	})
	if err == nil && size == info.Size() {
		return -1, nil
	}
	if err != nil && !errors.Is(err, ErrNotFound) {
		return 0, err
	}
	err = v.storeCall(ctx, "upload blob", key, func() error {
		if _, err := f.Seek(0, 0); err != nil {
			return permanentError{err}
		}
		return v.b.Put(ctx, key, f, info.Size())
	})
	if err != nil {
		return 0, err
	}
	return info.Size(), nil
}

// markDirty flags the head before anything is uploaded, so that if this commit fails after
// uploading, the next one knows to sweep what it left. It returns the new revision. staging
// also counts a staged version to come (head.Staged).
func (v *Volumes) markDirty(ctx context.Context, name string, h *head, rev uint64, staging bool) (uint64, error) {
	if h.Dirty && !staging {
		return rev, nil
	}
	d := *h
	d.Dirty = true
	if staging {
		d.Staged++
	}
	return v.writeHead(ctx, name, &d, rev)
}

// publish writes the manifest of a new version and makes it current: the head's
// compare-and-set is the commit point. Old versions beyond KeepVersions are then collected.
func (v *Volumes) publish(ctx context.Context, l *lease, name string, h *head, rev uint64, nm *manifest, rec versionRec, sweep bool) error {
	data, hash, err := encodeManifest(nm)
	if err != nil {
		return err
	}
	rec.Version, rec.Manifest = nm.Version, hash
	nh := &head{Version: nm.Version, Versions: append(slices.Clone(h.Versions), rec), Staged: h.Staged}
	if n := len(nh.Versions); n > v.opts.KeepVersions {
		nh.Versions = nh.Versions[n-v.opts.KeepVersions:]
	}
	// The manifest and the head marker, both after every blob and before the commit point
	// (the package doc says why that order is safe). They go side by side, not one after the
	// other: a marker whose manifest is missing is never recovered, so their order does not
	// matter, and this keeps the marker's cost off the commit's latency.
	key := manifestKey(name, rec)
	var mkey string
	err = parallel(ctx, 2, 2, func(ctx context.Context, i int) error {
		if i == 1 {
			var err error
			mkey, err = v.writeMarker(ctx, name, nh)
			return err
		}
		return v.storeCall(ctx, "write manifest", key, func() error {
			return v.b.Put(ctx, key, bytes.NewReader(data), int64(len(data)))
		})
	})
	if err != nil {
		if mkey != "" {
			v.dropMarker(ctx, name, mkey)
		}
		return fmt.Errorf("%w; nothing was committed, version %d is still current", err, h.Version)
	}
	if v.cache != nil {
		if f, _, err := v.cache.put(hash, bytes.NewReader(data)); err == nil {
			f.Close()
		}
	}
	// Last look before the commit point: a run whose lease expired (a stalled host) must not
	// commit over the run that took the volume after it.
	if err := l.verify(ctx); err != nil {
		v.dropMarker(ctx, name, mkey)
		return fmt.Errorf("%w; nothing was committed, version %d is still current", err, h.Version)
	}
	newRev, err := v.writeHead(ctx, name, nh, rev)
	if err != nil {
		// Only a refused compare-and-set is sure not to have landed; after a timeout the head
		// may have moved, and then its marker must stay.
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			v.dropMarker(ctx, name, mkey)
		}
		return fmt.Errorf("%w; version %d is still current", err, h.Version)
	}
	if err := v.collect(ctx, name, h, nh, sweep); err != nil {
		v.log.Warn("volume garbage collection failed; the next commit will sweep again", zap.String("volume", name), zap.Error(err))
		d := *nh
		d.Dirty = true
		if _, err := v.writeHead(ctx, name, &d, newRev); err != nil {
			v.log.Warn("cannot flag the volume for a sweep", zap.String("volume", name), zap.Error(err))
		}
	}
	return nil
}

// collect deletes the objects no kept version references. Normally that is the manifests of
// the versions that fell out of the history and the blobs only they used; after a failure
// (sweep) everything under the volume's prefix is listed and checked.
func (v *Volumes) collect(ctx context.Context, name string, old, nh *head, sweep bool) error {
	var dropped []versionRec
	for _, r := range old.Versions {
		if kept, ok := nh.find(r.Version); !ok || kept.Manifest != r.Manifest {
			dropped = append(dropped, r)
		}
	}
	if !sweep && len(dropped) == 0 {
		return nil // the common case while the history is not full: no manifest to read
	}
	keep := map[string]bool{}
	for _, r := range nh.Versions {
		m, err := v.loadManifest(ctx, name, r)
		if err != nil {
			return err
		}
		keep[manifestKey(name, r)] = true
		for _, e := range m.Entries {
			if e.Type == typeFile {
				keep[blobKey(name, e.Hash)] = true
			}
		}
	}
	if old.Staged > 0 || nh.Staged > 0 {
		if err := v.keepStaged(ctx, name, keep, ""); err != nil {
			return err
		}
	}
	// Markers go with the rest, in one batch: one left by a collection that stopped half-way
	// names a version whose objects may be partly gone, which recovery checks for and passes
	// over (recover.go), so no extra round trip per commit is spent ordering the deletions.
	var markers, garbage []string
	if sweep {
		for _, r := range nh.Versions {
			keep[markerKey(name, r)] = true
		}
		for _, prefix := range []string{markerPrefix(name), volumePrefix(name)} {
			var keys []string
			err := v.storeCall(ctx, "list", prefix, func() error {
				var err error
				keys, err = v.b.List(ctx, prefix)
				return err
			})
			if err != nil {
				return err
			}
			for _, k := range keys {
				switch {
				case keep[k]:
				case prefix == markerPrefix(name):
					markers = append(markers, k)
				default:
					garbage = append(garbage, k)
				}
			}
		}
	} else {
		seen := map[string]bool{}
		for _, r := range dropped {
			m, err := v.loadManifest(ctx, name, r)
			if err != nil {
				return err
			}
			markers = append(markers, markerKey(name, r))
			garbage = append(garbage, manifestKey(name, r))
			for _, e := range m.Entries {
				if k := blobKey(name, e.Hash); e.Type == typeFile && !keep[k] && !seen[k] {
					seen[k] = true
					garbage = append(garbage, k)
				}
			}
		}
	}
	garbage = append(garbage, markers...)
	err := v.deleteAll(ctx, garbage)
	if err == nil && len(garbage) > 0 {
		v.log.Debug("collected volume garbage", zap.String("volume", name), zap.Int("objects", len(garbage)))
	}
	return err
}

// deleteAll deletes keys from the store, several at a time.
func (v *Volumes) deleteAll(ctx context.Context, keys []string) error {
	return parallel(ctx, v.ioWorkers, len(keys), func(ctx context.Context, i int) error {
		return v.storeCall(ctx, "delete", keys[i], func() error { return v.b.Delete(ctx, keys[i]) })
	})
}

// Release commits nothing, frees the volume for the next run and stops renewing its lease.
// It is safe to call more than once, and on a nil Mounted.
func (m *Mounted) Release(ctx context.Context) error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.released {
		return nil
	}
	m.released = true
	if m.committed {
		// Kept warm before the lease goes, so the next holder on this host finds it.
		m.v.stash(m.name, m.root, m.rel, m.version, m.known)
	}
	if m.ownRoot {
		m.root.Close()
	}
	return m.lease.release(ctx)
}

// staleHeadWait bounds how long a commit waits for a head read that is older than the
// version its run checked out to catch up.
const staleHeadWait = 60 * time.Second

// currentHead reads a volume's head for a run that checked out version at, reading again while
// what it reads is older than that. A head never goes back, so an older one is a stale copy: a
// KeyValue read may be answered by any replica (direct get), and one cut off from the others (a
// partition) answers with what it last had. That is a NATS that cannot be reached yet, not a
// volume that moved, so it is waited out (bounded by ctx and staleHeadWait) as a write that
// cannot reach the leader is; only a newer head is refused by the caller.
func (v *Volumes) currentHead(ctx context.Context, name string, at uint64) (*head, uint64, error) {
	deadline := time.Now().Add(staleHeadWait)
	for warned := false; ; {
		h, rev, err := v.readHead(ctx, name)
		if err != nil {
			return nil, 0, err
		}
		if h == nil {
			h = &head{}
		}
		if h.Version >= at || time.Now().After(deadline) {
			return h, rev, nil
		}
		if !warned {
			warned = true
			v.log.Warn("a read of the volume's head is older than the version this run checked out: a NATS replica that is behind answered; reading again until a current one does",
				zap.String("volume", name), zap.Uint64("checked_out", at), zap.Uint64("read", h.Version))
		}
		select {
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("read head of volume %s: %w", name, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}
