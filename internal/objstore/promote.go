package objstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"go.uber.org/zap"
)

// Held is the leases of several volumes, taken together for one piece of work that must not
// interleave with a commit, a collection or another such piece: an approval's decision, which
// promotes or discards its staged versions and records itself while it holds them (so that two
// decisions on one step cannot both act). Release gives them back.
type Held struct {
	v      *Volumes
	holder string
	leases map[string]*lease
}

// Hold takes the leases of the named volumes for holder, in name order (as jobs mount them, so
// that nobody deadlocks), waiting while others hold them.
func (v *Volumes) Hold(ctx context.Context, names []string, holder string) (*Held, error) {
	names = slices.Clone(names)
	slices.Sort(names)
	names = slices.Compact(names)
	hd := &Held{v: v, holder: holder, leases: map[string]*lease{}}
	for _, name := range names {
		if err := checkName(name); err != nil {
			hd.Release(ctx)
			return nil, err
		}
		l, err := v.acquire(ctx, name, holder)
		if err != nil {
			hd.Release(ctx)
			return nil, err
		}
		hd.leases[name] = l
	}
	return hd, nil
}

// Release gives every lease back. Safe to call more than once.
func (hd *Held) Release(ctx context.Context) {
	for name, l := range hd.leases {
		if err := l.release(ctx); err != nil {
			hd.v.log.Warn("cannot release volume lease", zap.String("volume", name), zap.Error(err))
		}
		delete(hd.leases, name)
	}
}

func (hd *Held) lease(name string) (*lease, error) {
	l, ok := hd.leases[name]
	if !ok {
		return nil, fmt.Errorf("volume %s is not among the volumes held for %s (a bug: hold every volume first)", name, hd.holder)
	}
	return l, nil
}

// Promote makes a staged version the volume's head (see PromoteAll).
func (v *Volumes) Promote(ctx context.Context, ref StagedRef, holder string) error {
	return v.PromoteAll(ctx, []StagedRef{ref}, holder)
}

// PromoteAll is Held.PromoteAll with the volumes' leases taken for the call.
func (v *Volumes) PromoteAll(ctx context.Context, refs []StagedRef, holder string) error {
	names := make([]string, len(refs))
	for i, r := range refs {
		names[i] = r.Volume
	}
	hd, err := v.Hold(ctx, names, holder)
	if err != nil {
		return fmt.Errorf("promote staged volume versions: %w; no head was moved", err)
	}
	defer hd.Release(ctx)
	return hd.PromoteAll(ctx, refs)
}

// PromoteAll makes staged versions their volumes' heads, each by compare-and-set from its
// ref.Base, writing its head marker as a commit does. It checks every volume before it moves
// any head, so that a refusal moves none: a head that is no longer ref.Base, a removed volume
// or a staged version that is gone refuse them all with an error wrapping ErrStaleStage, every
// head left as it was. What is not atomic is a failure of the store or of NATS between two
// heads' moves: those before it stay moved, and the error says which. A version that already
// is the head (a decision that came up again) counts as promoted.
func (hd *Held) PromoteAll(ctx context.Context, refs []StagedRef) error {
	v := hd.v
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
	for _, ref := range refs {
		l, err := hd.lease(ref.Volume)
		if err != nil {
			return err
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
		v.log.Info("promoted staged volume version", zap.String("volume", name), zap.Uint64("version", mv.ref.Version), zap.String("by", hd.holder))
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

// Discard is Held.Discard with the volume's lease taken for the call.
func (v *Volumes) Discard(ctx context.Context, ref StagedRef, holder string) error {
	hd, err := v.Hold(ctx, []string{ref.Volume}, holder)
	if err != nil {
		return fmt.Errorf("discard staged version %d of volume %s: %w", ref.Version, ref.Volume, err)
	}
	defer hd.Release(ctx)
	return hd.Discard(ctx, ref)
}

// Discard removes a staged version and collects its data: its manifest and every blob that no
// kept version and no other staged version uses. A staged version already gone, or already the
// head (promoted), leaves the store as it is.
func (hd *Held) Discard(ctx context.Context, ref StagedRef) error {
	v, name := hd.v, ref.Volume
	if _, err := hd.lease(name); err != nil {
		return err
	}
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
		zap.Int("objects", len(garbage)), zap.String("by", hd.holder))
	return nil
}
