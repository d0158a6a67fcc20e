package objstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
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
	var out []stagedRec
	err := v.kvCall(ctx, "list staged versions of volume", StagedBucket, name, func() error {
		out = out[:0]
		kl, err := v.staged.ListKeysFiltered(ctx, kvKey(name)+".>")
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
			// Another volume's ("a" lists "a.b"'s too) or an entry that does not decode (kept,
			// never trusted) is passed over.
			if json.Unmarshal(e.Value(), &s) == nil && s.Volume == name {
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

// Promote makes a staged version the volume's head (see PromoteAll).
func (v *Volumes) Promote(ctx context.Context, ref StagedRef, holder string) error {
	return v.PromoteAll(ctx, []StagedRef{ref}, holder)
}

// PromoteAll makes staged versions their volumes' heads, each by compare-and-set from its
// ref.Base, writing its head marker as a commit does. It takes every volume's lease first (in
// name order, holder naming who asks) and checks every volume before it moves any head, so
// that a refusal moves none: a head that is no longer ref.Base, a removed volume or a staged
// version that is gone refuse them all with an error wrapping ErrStaleStage, every head left as
// it was. What is not atomic is a failure of the store or of NATS between two heads' moves:
// those before it stay moved, and the error says which. A version that already is the head (a
// decision that came up again) counts as promoted.
func (v *Volumes) PromoteAll(ctx context.Context, refs []StagedRef, holder string) error {
	refs = slices.Clone(refs)
	slices.SortFunc(refs, func(a, b StagedRef) int { return strings.Compare(a.Volume, b.Volume) })
	type move struct {
		ref  StagedRef
		l    *lease
		h    *head
		rev  uint64
		s    *stagedRec
		done bool
	}
	moves := make([]*move, 0, len(refs))
	defer func() {
		for _, mv := range moves {
			if err := mv.l.release(ctx); err != nil {
				v.log.Warn("cannot release volume lease", zap.String("volume", mv.ref.Volume), zap.Error(err))
			}
		}
	}()
	for _, ref := range refs {
		if err := checkName(ref.Volume); err != nil {
			return err
		}
		l, err := v.acquire(ctx, ref.Volume, holder)
		if err != nil {
			return fmt.Errorf("promote staged version %d of volume %s: %w; no head was moved", ref.Version, ref.Volume, err)
		}
		mv := &move{ref: ref, l: l}
		moves = append(moves, mv)
		if mv.h, mv.rev, mv.s, mv.done, err = v.promotable(ctx, ref); err != nil {
			return fmt.Errorf("%w; no head was moved", err)
		}
	}
	var moved []string
	for _, mv := range moves {
		if mv.done {
			moved = append(moved, mv.ref.Volume)
			continue
		}
		name := mv.ref.Volume
		nm, err := v.loadManifest(ctx, name, mv.s.Rec)
		if err == nil {
			// One staged version fewer, counted down with the head's move: the entry goes
			// next, and until then its data is a kept version's.
			h := *mv.h
			h.Staged = max(h.Staged-1, 0)
			err = v.publish(ctx, mv.l, name, &h, mv.rev, nm, mv.s.Rec, mv.h.Dirty)
		}
		if err != nil {
			return fmt.Errorf("promote staged version %d of volume %s: %w (heads moved before it: %s)", mv.ref.Version, name, err, orNone(moved))
		}
		moved = append(moved, name)
		v.log.Info("promoted staged volume version", zap.String("volume", name), zap.Uint64("version", mv.ref.Version), zap.String("by", holder))
	}
	for _, mv := range moves {
		if err := v.dropStagedEntry(ctx, mv.ref); err != nil {
			v.log.Warn("promoted, but cannot delete the staged entry; it is dropped by a later discard", zap.String("volume", mv.ref.Volume), zap.Error(err))
		}
	}
	return nil
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// promotable checks, under the volume's lease, that ref can become the head: done when it
// already is.
func (v *Volumes) promotable(ctx context.Context, ref StagedRef) (*head, uint64, *stagedRec, bool, error) {
	name := ref.Volume
	h, rev, err := v.readHead(ctx, name)
	if err != nil {
		return nil, 0, nil, false, err
	}
	if cur, ok := h.current(); ok && cur.Version == ref.Version && cur.Manifest == ref.Manifest {
		return h, rev, nil, true, nil
	}
	s, err := v.readStaged(ctx, ref)
	if err != nil {
		return nil, 0, nil, false, err
	}
	refuse := func(why string, args ...any) error {
		return fmt.Errorf("promote the staged changes of volume %s (version %d, made on version %d): %s; the head is left as it was: run the step again: %w",
			name, ref.Version, ref.Base, fmt.Sprintf(why, args...), ErrStaleStage)
	}
	switch {
	case s == nil:
		return nil, 0, nil, false, refuse("the staged version is gone (the volume was removed, or the staged changes were discarded)")
	case h == nil || (h.Version == 0 && len(h.Versions) == 0 && ref.Base != 0):
		return nil, 0, nil, false, refuse("the volume was removed while the changes waited for a decision")
	case h.Version != ref.Base:
		return nil, 0, nil, false, refuse("the volume moved to version %d meanwhile (another job committed, another staged step was approved first, or it was restored)", h.Version)
	}
	return h, rev, s, false, nil
}

// Discard removes a staged version and collects its data: its manifest and every blob that no
// kept version and no other staged version uses. It works under the volume's lease (holder names
// who asks). A staged version already gone, or already the head (promoted), leaves the store as
// it is.
func (v *Volumes) Discard(ctx context.Context, ref StagedRef, holder string) error {
	if err := checkName(ref.Volume); err != nil {
		return err
	}
	name := ref.Volume
	l, err := v.acquire(ctx, name, holder)
	if err != nil {
		return fmt.Errorf("discard staged version %d of volume %s: %w", ref.Version, name, err)
	}
	defer func() {
		if err := l.release(ctx); err != nil {
			v.log.Warn("cannot release volume lease", zap.String("volume", name), zap.Error(err))
		}
	}()
	s, err := v.readStaged(ctx, ref)
	if err != nil || s == nil {
		return err
	}
	h, _, err := v.readHead(ctx, name)
	if err != nil {
		return err
	}
	if h == nil {
		h = &head{}
	}
	if r, ok := h.find(ref.Version); ok && r.Manifest == ref.Manifest {
		return v.dropStagedEntry(ctx, ref) // it is a kept version now: its data stays
	}
	garbage, err := v.stagedGarbage(ctx, h, s)
	if err != nil {
		return fmt.Errorf("discard staged version %d of volume %s: %w", ref.Version, name, err)
	}
	// The data before the entry: an entry whose data is partly gone is refused by Promote
	// (its manifest is missing), while data without an entry would never be collected.
	if err := v.deleteAll(ctx, garbage); err != nil {
		return fmt.Errorf("discard staged version %d of volume %s: %w", ref.Version, name, err)
	}
	if err := v.dropStagedEntry(ctx, ref); err != nil {
		return err
	}
	v.countDown(ctx, name)
	v.log.Info("discarded staged volume version", zap.String("volume", name), zap.Uint64("version", ref.Version),
		zap.Int("objects", len(garbage)), zap.String("by", holder))
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
