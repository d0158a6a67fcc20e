package objstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// Staged versions (approve: ... stage). A staged version is a commit that stops short of its
// commit point: its blobs are uploaded and its manifest written at the key a committed
// version's would have, but the head does not move. What says it exists is one entry in the
// KeyValue bucket agent_volume_staged, written before the stage's lease is released, so that a
// restarted host still knows it and the collector never deletes what it references (collect
// keeps every live staged version's manifest and blobs, keepStaged).
//
// Approve (Promote) moves the head to the staged version by compare-and-set from the version
// the step checked out, not by holding the volume's lease while a person decides: a lease held
// for hours would stop every other job of the volume. The price is that a head that moved
// meanwhile (another commit, another staged step approved first, a restore) refuses the
// promotion, and the step has to run again on the new head. Promote and Discard take the
// lease for the moment they work, so they never interleave with a commit or its collection.
const StagedBucket = "agent_volume_staged"

// ErrStaleStage is wrapped by a promotion refused because the volume is no longer where the
// staged step left it: its head moved, or the volume or the staged version is gone.
var ErrStaleStage = errors.New("the staged changes no longer apply")

// StagedRef names one staged version.
type StagedRef struct {
	Volume   string `json:"volume"`
	Base     uint64 `json:"base"`     // the head the step checked out; 0 for a new volume
	Version  uint64 `json:"version"`  // the version Promote makes current
	Manifest string `json:"manifest"` // the staged manifest's sha256
}

// StageResult is what Stage did. Staged is false when the job changed nothing: there is no
// staged version then, and nothing to approve for this volume.
type StageResult struct {
	Staged bool
	Ref    StagedRef
	// What changed against Base, files and symlinks (directories are not listed): counts are
	// whole, the lists are cut at the maxPaths given to Stage.
	Added, Removed, Changed    []string
	NAdded, NRemoved, NChanged int
	Bytes                      int64 // the staged version's total size
	Stats                      SyncStats
}

// stagedRec is what a staged version's KeyValue entry holds.
type stagedRec struct {
	Volume string     `json:"volume"`
	Base   uint64     `json:"base"`
	Rec    versionRec `json:"rec"` // the history record it gets when promoted
}

func stagedKey(name string, version uint64, hash string) string {
	return fmt.Sprintf("%s.%020d-%s", kvKey(name), version, hash)
}

func (r StagedRef) key() string { return stagedKey(r.Volume, r.Version, r.Manifest) }

// Stage is Commit for approve: ... stage: the content and manifest of the new version are
// stored and the version recorded as staged, but the head stays where it is, so other jobs keep
// reading it. The checkout is not kept warm (it is not the head). maxPaths bounds the path
// lists of the result. Over a limit it fails with ErrLimit, as Commit does.
func (m *Mounted) Stage(ctx context.Context, jobID string, maxPaths int) (StageResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	res, err := m.stage(ctx, jobID, maxPaths)
	if err != nil {
		return StageResult{}, fmt.Errorf("stage volume %s: %w", m.name, err)
	}
	return res, nil
}

func (m *Mounted) stage(ctx context.Context, jobID string, maxPaths int) (StageResult, error) {
	start := time.Now()
	p, cres, err := m.prepare(ctx, true)
	if p == nil || err != nil {
		return StageResult{Stats: cres.Stats}, err
	}
	defer p.vd.Close()
	v := m.v
	nm := &manifest{Volume: m.name, Version: p.h.Version + 1, Entries: p.entries}
	data, hash, err := encodeManifest(nm)
	if err != nil {
		return StageResult{}, err
	}
	rec := p.rec(jobID)
	rec.Version, rec.Manifest = nm.Version, hash
	key := manifestKey(m.name, rec)
	err = v.storeCall(ctx, "write manifest", key, func() error {
		return v.b.Put(ctx, key, bytes.NewReader(data), int64(len(data)))
	})
	if err != nil {
		return StageResult{}, fmt.Errorf("%w; nothing was staged", err)
	}
	if f, _, err := v.cache.put(hash, bytes.NewReader(data)); err == nil {
		f.Close() // approve on this host (and the diff) then reads it without a download
	}
	// The entry only while the lease is still this run's: once it has passed to another run,
	// that run's collection may already have swept the blobs just uploaded.
	if err := m.lease.verify(ctx); err != nil {
		return StageResult{}, fmt.Errorf("%w; nothing was staged", err)
	}
	ref := StagedRef{Volume: m.name, Base: m.version, Version: nm.Version, Manifest: hash}
	val, _ := json.Marshal(stagedRec{Volume: m.name, Base: m.version, Rec: rec})
	err = v.kvCall(ctx, "record staged version of volume", StagedBucket, m.name, func() error {
		_, err := v.staged.Put(ctx, ref.key(), val)
		return err
	})
	if err != nil {
		return StageResult{}, fmt.Errorf("record the staged version: %w; nothing was staged", err)
	}
	m.committed = false // the checkout holds the staged version, not the head: never kept warm
	res := StageResult{Staged: true, Ref: ref, Bytes: p.total, Stats: cres.Stats}
	res.Added, res.Removed, res.Changed, res.NAdded, res.NRemoved, res.NChanged = summarize(m.base.Entries, p.entries, maxPaths)
	res.Stats.Duration = time.Since(start)
	v.log.Info("staged volume", zap.String("volume", m.name), zap.Uint64("base", ref.Base), zap.Uint64("version", ref.Version),
		zap.String("job", jobID), zap.Int("files_changed", p.changed), zap.Int64("bytes_uploaded", res.Stats.BytesUploaded))
	return res, nil
}

// summarize lists the files and symlinks added, removed and changed from old to cur (both
// sorted by path), each list cut at max, with whole counts.
func summarize(old, cur []entry, max int) (added, removed, changed []string, na, nr, nc int) {
	prev := make(map[string]entry, len(old))
	for _, e := range old {
		if e.Type != typeDir {
			prev[e.Path] = e
		}
	}
	add := func(list *[]string, n *int, p string) {
		if *n++; len(*list) < max {
			*list = append(*list, p)
		}
	}
	for _, e := range cur {
		if e.Type == typeDir {
			continue
		}
		o, ok := prev[e.Path]
		switch {
		case !ok:
			add(&added, &na, e.Path)
		case !o.same(e):
			add(&changed, &nc, e.Path)
		}
		delete(prev, e.Path)
	}
	for _, e := range old {
		if _, ok := prev[e.Path]; ok {
			add(&removed, &nr, e.Path)
		}
	}
	return added, removed, changed, na, nr, nc
}

// readStaged returns a staged version's entry, or nil when there is none.
func (v *Volumes) readStaged(ctx context.Context, ref StagedRef) (*stagedRec, error) {
	var e jetstream.KeyValueEntry
	err := v.kvCall(ctx, "read staged version of volume", StagedBucket, ref.Volume, func() error {
		var err error
		e, err = v.staged.Get(ctx, ref.key())
		return err
	})
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read staged version %d of volume %s: %w", ref.Version, ref.Volume, err)
	}
	var s stagedRec
	if err := json.Unmarshal(e.Value(), &s); err != nil || s.Volume != ref.Volume || s.Rec.Version != ref.Version || s.Rec.Manifest != ref.Manifest {
		return nil, fmt.Errorf("staged version %d of volume %s: its entry in KeyValue %s does not match it: %w", ref.Version, ref.Volume, StagedBucket, ErrCorrupt)
	}
	return &s, nil
}

// stagedOf lists the staged versions of a volume.
func (v *Volumes) stagedOf(ctx context.Context, name string) ([]stagedRec, error) {
	return v.listStaged(ctx, name, kvKey(name)+".>")
}

// listStaged lists the staged entries whose keys match filter, of volume name only (""
// for every volume): "a.>" lists "a.b"'s too, and an entry that does not decode is passed over
// (kept, never trusted).
func (v *Volumes) listStaged(ctx context.Context, name, filter string) ([]stagedRec, error) {
	var out []stagedRec
	err := v.kvCall(ctx, "list staged versions of volume", StagedBucket, filter, func() error {
		out = out[:0]
		kl, err := v.staged.ListKeysFiltered(ctx, filter)
		if err != nil {
			return err
		}
		defer kl.Stop()
		for k := range kl.Keys() {
			e, err := v.staged.Get(ctx, k)
			if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
				continue // discarded meanwhile
			}
			if err != nil {
				return err
			}
			var s stagedRec
			if json.Unmarshal(e.Value(), &s) == nil && checkName(s.Volume) == nil && (name == "" || s.Volume == name) {
				out = append(out, s)
			}
		}
		return nil
	})
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	return out, err
}

// StagedEntry is one staged version as its bucket lists it: which job staged it, and when.
type StagedEntry struct {
	Ref   StagedRef
	JobID string
	Time  time.Time
}

// AllStaged lists every staged version of every volume, for a sweep of those whose step will
// never be decided (its host died between staging and recording the step as waiting).
func (v *Volumes) AllStaged(ctx context.Context) ([]StagedEntry, error) {
	staged, err := v.listStaged(ctx, "", ">")
	if err != nil {
		return nil, err
	}
	out := make([]StagedEntry, len(staged))
	for i, s := range staged {
		out[i] = StagedEntry{Ref: StagedRef{Volume: s.Volume, Base: s.Base, Version: s.Rec.Version, Manifest: s.Rec.Manifest},
			JobID: s.Rec.JobID, Time: s.Rec.Time}
	}
	return out, nil
}

// keepStaged adds to keep the manifests and blobs of the volume's live staged versions, but
// except's: the collector must never delete what a staged version awaiting a decision uses.
// A staged manifest already gone (a discard that stopped half-way) has nothing left to keep.
func (v *Volumes) keepStaged(ctx context.Context, name string, keep map[string]bool, except string) error {
	staged, err := v.stagedOf(ctx, name)
	if err != nil {
		return err
	}
	for _, s := range staged {
		if s.Rec.Manifest == except {
			continue
		}
		m, err := v.loadManifest(ctx, name, s.Rec)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		keep[manifestKey(name, s.Rec)] = true
		for _, e := range m.Entries {
			if e.Type == typeFile {
				keep[blobKey(name, e.Hash)] = true
			}
		}
	}
	return nil
}

// stagedGarbage is what discarding s deletes: its manifest and the blobs that neither a kept
// version of h nor another staged version uses.
func (v *Volumes) stagedGarbage(ctx context.Context, h *head, s *stagedRec) ([]string, error) {
	name := s.Volume
	m, err := v.loadManifest(ctx, name, s.Rec)
	if errors.Is(err, ErrNotFound) {
		return nil, nil // a discard that stopped half-way: nothing left to find blobs by
	}
	if err != nil {
		return nil, err
	}
	keep := map[string]bool{}
	for _, r := range h.Versions {
		km, err := v.loadManifest(ctx, name, r)
		if err != nil {
			return nil, err
		}
		for _, e := range km.Entries {
			keep[blobKey(name, e.Hash)] = true
		}
	}
	if err := v.keepStaged(ctx, name, keep, s.Rec.Manifest); err != nil {
		return nil, err
	}
	garbage := []string{manifestKey(name, s.Rec)}
	for _, e := range m.Entries {
		if k := blobKey(name, e.Hash); e.Type == typeFile && e.Hash != emptyHash && !keep[k] {
			keep[k] = true
			garbage = append(garbage, k)
		}
	}
	return garbage, nil
}

// dropStagedEntry deletes a staged version's entry.
func (v *Volumes) dropStagedEntry(ctx context.Context, ref StagedRef) error {
	err := v.kvCall(ctx, "delete staged version of volume", StagedBucket, ref.Volume, func() error {
		return v.staged.Delete(ctx, ref.key())
	})
	if err != nil {
		return fmt.Errorf("delete the entry of staged version %d of volume %s: %w", ref.Version, ref.Volume, err)
	}
	return nil
}

// dropStaged deletes every staged entry of a removed volume, whose objects are gone.
func (v *Volumes) dropStaged(ctx context.Context, name string) error {
	staged, err := v.stagedOf(ctx, name)
	if err != nil {
		return err
	}
	for _, s := range staged {
		if err := v.dropStagedEntry(ctx, StagedRef{Volume: name, Version: s.Rec.Version, Manifest: s.Rec.Manifest}); err != nil {
			return err
		}
	}
	return nil
}

// countDown lowers the head's count of staged versions after a discard. Best effort: a count
// left too high costs a listing per collection, never data.
func (v *Volumes) countDown(ctx context.Context, name string) {
	h, rev, err := v.readHead(ctx, name)
	if err == nil && h != nil && h.Staged > 0 {
		d := *h
		d.Staged--
		_, err = v.writeHead(ctx, name, &d, rev)
	}
	if err != nil {
		v.log.Warn("cannot count a discarded staged version out of the volume's head", zap.String("volume", name), zap.Error(err))
	}
}
