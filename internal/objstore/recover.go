package objstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// What Recover did, or would do, with a volume it found in the store.
const (
	// RecoverCreated: the volume had no head in NATS; it has the store's now.
	RecoverCreated = "recovered"
	// RecoverWouldCreate: as RecoverCreated, in a dry run.
	RecoverWouldCreate = "would recover"
	// RecoverAtOrPast: NATS's head is at or past the store's newest version; left alone.
	RecoverAtOrPast = "skipped: NATS head at or past the store's"
	// RecoverBehind: NATS's head is behind the store's; left alone, because moving a live
	// head is a commit that no run made (the newer marker may be a commit whose host died
	// before its compare-and-set).
	RecoverBehind = "skipped: NATS head behind the store's (left as is)"
	// RecoverRemoved: NATS holds an empty head (a removal in progress); left alone.
	RecoverRemoved = "skipped: being removed"
	// RecoverUnreadable: NATS holds a head that does not decode; not this command's to replace.
	RecoverUnreadable = "skipped: NATS head unreadable"
	// RecoverBroken: no marker of the volume is usable (each fails to decode, or names a
	// manifest that is missing or does not match); nothing is written.
	RecoverBroken = "skipped: no usable marker"
)

// RecoveredVolume is one volume Recover found in the store.
type RecoveredVolume struct {
	Name string `json:"name"`
	// StoreVersion is the newest usable version the store's markers name (0 when none is).
	StoreVersion uint64 `json:"store_version"`
	// NATSVersion is the head NATS held before (0 when it had none).
	NATSVersion uint64 `json:"nats_version"`
	// Versions counts the kept versions recovered (or that would be).
	Versions int    `json:"versions"`
	Action   string `json:"action"`
	// Notes say what was odd: a marker that could not be used, an old version whose manifest
	// is gone (dropped from the recovered history), two markers for the same version.
	Notes []string `json:"notes,omitempty"`
}

// RecoverReport says what Recover found and did.
type RecoverReport struct {
	Store   string            `json:"store"`
	DryRun  bool              `json:"dry_run,omitempty"`
	Volumes []RecoveredVolume `json:"volumes"`
	// Recovered counts the heads written (or, in a dry run, that would be); Skipped the
	// volumes left alone because NATS has a head; Broken those without a usable marker.
	Recovered int `json:"recovered"`
	Skipped   int `json:"skipped"`
	Broken    int `json:"broken"`
	// Stray counts objects under the markers' prefix that are not markers (never trusted).
	Stray int `json:"stray,omitempty"`
	// Unmarked, looked for only when the store holds no marker at all, counts the volumes
	// that have objects but no marker: written by a host from before markers, or by a commit
	// that never reached its marker. Neither can be recovered.
	Unmarked []string `json:"unmarked,omitempty"`
}

// RecoverOptions configure Recover.
type RecoverOptions struct {
	DryRun bool // say what would be done, write nothing
}

// Recover rebuilds, from the store alone, the NATS head (current version and kept history) of
// every volume that has none: after NATS lost its data, say, while the bucket kept every byte.
// It never moves an existing head, forwards or backwards; a volume whose head NATS has is
// reported and left as it is. Each recovered head is marked dirty, so the volume's next commit
// sweeps whatever an interrupted commit left in the store.
//
// A version is recovered only from its head marker, which a commit writes after all its data
// and its manifest: a commit interrupted before that left no marker and is never taken as the
// head. The marker's manifest must be in the store and hash to its name, or the next older
// marker is tried.
func (v *Volumes) Recover(ctx context.Context, o RecoverOptions) (RecoverReport, error) {
	rep := RecoverReport{Store: v.b.Name(), DryRun: o.DryRun, Volumes: []RecoveredVolume{}}
	var keys []string
	err := v.storeCall(ctx, "list", markersRoot, func() error {
		var err error
		keys, err = v.b.List(ctx, markersRoot)
		return err
	})
	if err != nil {
		return rep, fmt.Errorf("recover volumes: %w", err)
	}
	byName := map[string][]markerRef{}
	for _, k := range keys {
		ref, ok := parseMarkerKey(k)
		if !ok {
			rep.Stray++
			v.log.Warn("object among the volume head markers is not one; ignored", zap.String("store", v.b.Name()), zap.String("key", k))
			continue
		}
		byName[ref.name] = append(byName[ref.name], ref)
	}
	if len(byName) == 0 {
		if rep.Unmarked, err = v.unmarked(ctx); err != nil {
			return rep, fmt.Errorf("recover volumes: %w", err)
		}
		return rep, nil
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	slices.Sort(names)
	rep.Volumes = make([]RecoveredVolume, len(names))
	err = parallel(ctx, v.ioWorkers, len(names), func(ctx context.Context, i int) error {
		var err error
		rep.Volumes[i], err = v.recoverOne(ctx, names[i], byName[names[i]], o)
		return err
	})
	if err != nil {
		return rep, fmt.Errorf("recover volumes: %w", err)
	}
	for _, rv := range rep.Volumes {
		switch rv.Action {
		case RecoverCreated, RecoverWouldCreate:
			rep.Recovered++
		case RecoverBroken:
			rep.Broken++
		default:
			rep.Skipped++
		}
	}
	return rep, nil
}

// RecoverIfEmpty runs Recover when NATS holds no volume head at all (a fresh NATS, or one that
// lost its data) and reports whether it did: a host starting on a bucket full of volumes must
// not begin their histories again at version 1. It costs one KeyValue status call otherwise.
func (v *Volumes) RecoverIfEmpty(ctx context.Context) (RecoverReport, bool, error) {
	var st jetstream.KeyValueStatus
	err := v.kvCall(ctx, "read status of", HeadsBucket, "", func() error {
		var err error
		st, err = v.heads.Status(ctx)
		return err
	})
	if err != nil {
		return RecoverReport{Store: v.b.Name()}, false, fmt.Errorf("recover volumes: %w", err)
	}
	// Values counts the entries ever kept, deletions included: any means NATS knew volumes.
	if st.Values() > 0 {
		return RecoverReport{Store: v.b.Name()}, false, nil
	}
	rep, err := v.Recover(ctx, RecoverOptions{})
	return rep, true, err
}

// recoverOne recovers one volume from its markers, newest first.
func (v *Volumes) recoverOne(ctx context.Context, name string, refs []markerRef, o RecoverOptions) (RecoveredVolume, error) {
	rv := RecoveredVolume{Name: name}
	h, _, err := v.readHead(ctx, name)
	if errors.Is(err, ErrCorrupt) {
		// NATS has a head, if an unreadable one: it is not this command's to replace.
		rv.Action, rv.Notes = RecoverUnreadable, []string{err.Error()}
		return rv, nil
	}
	if err != nil {
		return rv, err
	}
	if h != nil {
		rv.NATSVersion = h.Version
	}
	// Newest first; two markers for one version (a run that lost its lease and died before it
	// could delete its own) are told apart by their time, then by key.
	chosen, notes, err := v.newestUsable(ctx, name, refs)
	if err != nil {
		return rv, err
	}
	rv.Notes = notes
	if chosen == nil {
		rv.Action = RecoverBroken
		return rv, nil
	}
	rv.StoreVersion = chosen.Version
	switch {
	case h != nil && h.Version == 0:
		rv.Action = RecoverRemoved
		return rv, nil
	case h != nil && h.Version >= chosen.Version:
		rv.Action = RecoverAtOrPast
		return rv, nil
	case h != nil:
		rv.Action = RecoverBehind
		return rv, nil
	}
	nh := &head{Version: chosen.Version, Dirty: true}
	for _, r := range chosen.Versions {
		if r.Version != chosen.Version {
			key := manifestKey(name, r)
			if err := v.storeCall(ctx, "check manifest", key, func() error { _, err := v.b.Stat(ctx, key); return err }); err != nil {
				if !errors.Is(err, ErrNotFound) {
					return rv, err
				}
				rv.Notes = append(rv.Notes, fmt.Sprintf("version %d left out of the history: its manifest is gone", r.Version))
				continue
			}
		}
		nh.Versions = append(nh.Versions, r)
	}
	rv.Versions = len(nh.Versions)
	if o.DryRun {
		rv.Action = RecoverWouldCreate
		return rv, nil
	}
	data, err := json.Marshal(nh)
	if err != nil {
		return rv, fmt.Errorf("encode head of volume %s: %w", name, err)
	}
	attempts := 0
	err = v.kvCall(ctx, "create head of volume", HeadsBucket, name, func() error {
		attempts++
		_, err := v.heads.Create(ctx, kvKey(name), data)
		if errors.Is(err, jetstream.ErrKeyExists) && attempts > 1 {
			if e, gerr := v.heads.Get(ctx, kvKey(name)); gerr == nil && string(e.Value()) == string(data) {
				return nil // an earlier attempt that timed out landed
			}
		}
		return err
	})
	if errors.Is(err, jetstream.ErrKeyExists) {
		// A run (or another host's recovery) made a head meanwhile: it wins, as any head in
		// NATS does.
		if h, _, err := v.readHead(ctx, name); err == nil && h != nil {
			rv.NATSVersion = h.Version
		}
		rv.Action, rv.Versions = RecoverAtOrPast, 0
		return rv, nil
	}
	if err != nil {
		return rv, fmt.Errorf("create head of volume %s: %w", name, err)
	}
	rv.Action = RecoverCreated
	v.log.Info("recovered volume head from the store", zap.String("volume", name), zap.Uint64("version", nh.Version),
		zap.Int("versions", len(nh.Versions)), zap.String("store", v.b.Name()), zap.Strings("notes", rv.Notes))
	return rv, nil
}

// newestUsable reads a volume's markers newest version first, and returns the first that checks
// out, with a note for each one passed over; older markers are not read at all. Errors of the
// store itself (not of what it holds) stop the recovery: a store that cannot be read must not
// make a volume look broken.
func (v *Volumes) newestUsable(ctx context.Context, name string, refs []markerRef) (*marker, []string, error) {
	refs = slices.Clone(refs)
	slices.SortFunc(refs, func(a, b markerRef) int {
		if c := cmpUint(b.version, a.version); c != 0 {
			return c
		}
		return strings.Compare(b.key, a.key)
	})
	var notes []string
	for len(refs) > 0 {
		// All the markers of the newest version left: more than one means a run that lost
		// its lease died before it could delete its own; the one written last is taken.
		n := 1
		for n < len(refs) && refs[n].version == refs[0].version {
			n++
		}
		var best *marker
		var bestKey string
		for _, ref := range refs[:n] {
			mk, err := v.readMarker(ctx, ref)
			var bad badMarkerError
			if errors.As(err, &bad) {
				notes = append(notes, err.Error())
				continue
			}
			if err != nil {
				return nil, nil, err
			}
			if best == nil || mk.Versions[len(mk.Versions)-1].Time.After(best.Versions[len(best.Versions)-1].Time) {
				best, bestKey = mk, ref.key
			}
		}
		if best != nil {
			if n > 1 {
				notes = append(notes, fmt.Sprintf("%d markers for version %d (a commit that lost its lease left one): took the newest, %s",
					n, best.Version, bestKey))
			}
			return best, notes, nil
		}
		refs = refs[n:]
	}
	return nil, notes, nil
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// badMarkerError is a marker, or the manifest it names, that cannot be used: what the store
// holds is wrong, which retrying cannot change.
type badMarkerError struct{ msg string }

func (e badMarkerError) Error() string { return e.msg }

// readMarker reads and checks one marker and the manifest it names.
func (v *Volumes) readMarker(ctx context.Context, ref markerRef) (*marker, error) {
	bad := func(format string, a ...any) error {
		return badMarkerError{fmt.Sprintf("marker %s not used: ", ref.key) + fmt.Sprintf(format, a...)}
	}
	var data []byte
	err := v.storeCall(ctx, "read head marker", ref.key, func() error {
		rc, err := v.b.Get(ctx, ref.key)
		if err != nil {
			return err
		}
		defer rc.Close()
		// A marker is a head: a few hundred bytes a version. Far more is not one.
		data, err = io.ReadAll(io.LimitReader(rc, 16<<20))
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return nil, bad("it vanished while the store was read (a commit collecting it)")
	}
	if err != nil {
		return nil, err
	}
	var mk marker
	if err := json.Unmarshal(data, &mk); err != nil {
		return nil, bad("it does not decode: %v", err)
	}
	if err := mk.check(ref); err != nil {
		return nil, bad("%v", err)
	}
	r, _ := (&head{Version: mk.Version, Versions: mk.Versions}).current()
	m, err := v.loadManifest(ctx, ref.name, r)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, bad("its manifest %s is missing", manifestKey(ref.name, r))
	case errors.Is(err, ErrCorrupt):
		return nil, bad("its manifest: %v", err)
	case err != nil:
		return nil, err
	}
	if m.Volume != ref.name || m.Version != ref.version {
		return nil, bad("its manifest is of volume %q version %d", m.Volume, m.Version)
	}
	// Every blob, too: a collection or a removal that stopped half-way may have deleted some
	// of them and not yet the marker (the commit path does not order those deletions).
	sizes := map[string]int64{}
	for _, e := range m.Entries {
		if e.Type == typeFile && e.Hash != emptyHash {
			sizes[e.Hash] = e.Size
		}
	}
	hashes := make([]string, 0, len(sizes))
	for h := range sizes {
		hashes = append(hashes, h)
	}
	slices.Sort(hashes)
	missing := make([]bool, len(hashes))
	err = parallel(ctx, v.ioWorkers, len(hashes), func(ctx context.Context, i int) error {
		key := blobKey(ref.name, hashes[i])
		var size int64
		err := v.storeCall(ctx, "check blob", key, func() error {
			var err error
			size, err = v.b.Stat(ctx, key)
			return err
		})
		if errors.Is(err, ErrNotFound) || (err == nil && size != sizes[hashes[i]]) {
			missing[i] = true
			return nil
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	for i, gone := range missing {
		if gone {
			return nil, bad("blob %s of its version is missing or of the wrong size", blobKey(ref.name, hashes[i]))
		}
	}
	return &mk, nil
}

// unmarked lists the volumes that have objects in the store but no marker, to explain an
// empty recovery. It lists every object, so it runs only when no marker was found.
func (v *Volumes) unmarked(ctx context.Context) ([]string, error) {
	const root = "volumes/"
	var keys []string
	err := v.storeCall(ctx, "list", root, func() error {
		var err error
		keys, err = v.b.List(ctx, root)
		return err
	})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, k := range keys {
		name, _, ok := strings.Cut(strings.TrimPrefix(k, root), "/")
		if ok && (len(names) == 0 || names[len(names)-1] != name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}
