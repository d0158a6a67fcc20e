package objstore

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// VersionInfo describes one kept version of a volume. FilesChanged counts the entries added,
// changed or removed since the version before it, Bytes the size of the files added or
// changed; Files and TotalBytes describe the whole version.
type VersionInfo struct {
	Version      uint64    `json:"version"`
	Time         time.Time `json:"time"`
	JobID        string    `json:"job_id"`
	FilesChanged int       `json:"files_changed"`
	Files        int       `json:"files"`
	Bytes        int64     `json:"bytes_changed"`
	TotalBytes   int64     `json:"total_bytes"`
	// Manifest is the sha256 of the version's manifest, which names it in the store (and in a
	// staged approval's record: DiffVersions).
	Manifest string `json:"manifest"`
}

// List returns the names of the volumes that have at least one version, sorted.
func (v *Volumes) List(ctx context.Context) ([]string, error) {
	heads, err := v.allHeads(ctx)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(heads))
	for i, h := range heads {
		names[i] = h.name
	}
	return names, nil
}

// namedHead is the head of a volume that has at least one version.
type namedHead struct {
	name string
	head
}

// allHeads reads the head of every volume that has at least one version, sorted by name.
func (v *Volumes) allHeads(ctx context.Context) ([]namedHead, error) {
	var heads []namedHead
	err := v.kvCall(ctx, "list", HeadsBucket, "volumes", func() error {
		heads = heads[:0]
		w, err := v.heads.WatchAll(ctx, jetstream.IgnoreDeletes())
		if err != nil {
			return err
		}
		defer w.Stop()
		for {
			select {
			case e, ok := <-w.Updates():
				if !ok {
					return errors.New("watcher closed before listing all volumes")
				}
				if e == nil {
					return nil // all current values seen
				}
				var h head
				if json.Unmarshal(e.Value(), &h) == nil && h.Version > 0 {
					heads = append(heads, namedHead{nameFromKey(e.Key()), h})
				}
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	slices.SortFunc(heads, func(a, b namedHead) int { return strings.Compare(a.name, b.name) })
	return heads, nil
}

// headOf reads an existing volume's head; the error wraps ErrNotFound when there is none.
func (v *Volumes) headOf(ctx context.Context, name string) (*head, uint64, error) {
	if err := checkName(name); err != nil {
		return nil, 0, err
	}
	h, rev, err := v.readHead(ctx, name)
	if err != nil {
		return nil, 0, err
	}
	if h == nil || h.Version == 0 {
		return nil, 0, fmt.Errorf("volume %s: %w (it has no version yet, or was removed)", name, ErrNotFound)
	}
	return h, rev, nil
}

// History returns the kept versions of a volume, oldest first.
func (v *Volumes) History(ctx context.Context, name string) ([]VersionInfo, error) {
	h, _, err := v.headOf(ctx, name)
	if err != nil {
		return nil, err
	}
	out := make([]VersionInfo, 0, len(h.Versions))
	for _, r := range h.Versions {
		out = append(out, VersionInfo{Version: r.Version, Time: r.Time, JobID: r.JobID, FilesChanged: r.FilesChanged,
			Files: r.Files, Bytes: r.Bytes, TotalBytes: r.TotalBytes, Manifest: r.Manifest})
	}
	return out, nil
}

// pick returns the record of version (0 = the latest).
func pick(name string, h *head, version uint64) (versionRec, error) {
	if version == 0 {
		version = h.Version
	}
	r, ok := h.find(version)
	if !ok {
		return versionRec{}, fmt.Errorf("version %d of volume %s: %w (kept versions: %s)", version, name, ErrNotFound, h.keptRange())
	}
	return r, nil
}

// Get writes one file (path != "") or the whole volume as a tar stream (path == "") of a
// version (0 = latest). A path naming a directory gives a tar stream of that directory; names
// in a tar stream are relative to the volume's root. It does not take the lease: versions are
// immutable, and a version collected while it is read fails with ErrNotFound.
func (v *Volumes) Get(ctx context.Context, name string, version uint64, path string, w io.Writer) error {
	h, _, err := v.headOf(ctx, name)
	if err != nil {
		return err
	}
	r, err := pick(name, h, version)
	if err != nil {
		return err
	}
	m, err := v.loadManifest(ctx, name, r)
	if err != nil {
		return err
	}
	p := cleanGetPath(path)
	if p == "" {
		return v.writeTar(ctx, name, r, m.Entries, w)
	}
	i, found := slices.BinarySearchFunc(m.Entries, p, func(e entry, p string) int { return strings.Compare(e.Path, p) })
	if !found {
		return fmt.Errorf("%s in version %d of volume %s: %w", p, r.Version, name, ErrNotFound)
	}
	switch e := m.Entries[i]; e.Type {
	case typeSymlink:
		return fmt.Errorf("%s in version %d of volume %s is a symlink to %q; get its target, or the directory holding it as a tar stream", p, r.Version, name, e.Target)
	case typeDir:
		var sub []entry
		for _, e := range m.Entries {
			if e.Path == p || strings.HasPrefix(e.Path, p+"/") {
				sub = append(sub, e)
			}
		}
		return v.writeTar(ctx, name, r, sub, w)
	default:
		return v.copyBlob(ctx, name, e, w)
	}
}

// cleanGetPath turns a user's path into a manifest path; "" means the whole volume. It cannot
// leave the volume ("/../x" is "x"), and only the manifest is searched with it anyway.
func cleanGetPath(p string) string { return strings.Trim(path.Clean("/"+p), "/") }

func (v *Volumes) writeTar(ctx context.Context, name string, r versionRec, entries []entry, w io.Writer) error {
	tw := tar.NewWriter(w)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.Path, Mode: int64(e.Mode), ModTime: r.Time}
		switch e.Type {
		case typeDir:
			hdr.Typeflag, hdr.Name = tar.TypeDir, e.Path+"/"
		case typeSymlink:
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, e.Target
		default:
			hdr.Typeflag, hdr.Size = tar.TypeReg, e.Size
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("write tar of volume %s: %w", name, err)
		}
		if e.Type == typeFile {
			if err := v.copyBlob(ctx, name, e, tw); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("write tar of volume %s: %w", name, err)
	}
	return nil
}

// copyBlob writes a file's content to w, checking its hash. With a cache, the blob is fetched
// into it first (so a failed download is retried whole before anything is written);
// without one, it streams from the store and a damaged object is reported at its end.
func (v *Volumes) copyBlob(ctx context.Context, name string, e entry, w io.Writer) error {
	if e.Hash == emptyHash {
		return nil
	}
	var src io.ReadCloser
	if v.cache != nil {
		f := v.cache.open(e.Hash)
		if f == nil {
			var err error
			if f, _, err = v.download(ctx, name, e.Hash); err != nil {
				return err
			}
		}
		src = f
	} else {
		key := blobKey(name, e.Hash)
		err := v.storeCall(ctx, "download blob", key, func() error {
			var err error
			src, err = v.b.Get(ctx, key)
			return err
		})
		if err != nil {
			return err
		}
	}
	defer src.Close()
	h := sha256.New()
	n, err := io.Copy(w, io.TeeReader(src, h))
	if err != nil {
		return fmt.Errorf("copy %s of volume %s: %w", e.Path, name, err)
	}
	if got := hexSum(h); got != e.Hash || n != e.Size {
		return fmt.Errorf("copy %s of volume %s: %w", e.Path, name, &hashMismatchError{want: e.Hash, got: got})
	}
	return nil
}

func hexSum(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)) }

// Restore makes a new version of a volume equal to a kept old one, under the volume's lease,
// and returns the new version's number.
func (v *Volumes) Restore(ctx context.Context, name string, version uint64, holder string) (uint64, error) {
	if err := checkName(name); err != nil {
		return 0, err
	}
	l, err := v.acquire(ctx, name, holder)
	if err != nil {
		return 0, err
	}
	defer func() {
		if err := l.release(ctx); err != nil {
			v.log.Warn("cannot release volume lease", zap.String("volume", name), zap.Error(err))
		}
	}()
	h, rev, err := v.headOf(ctx, name)
	if err != nil {
		return 0, err
	}
	if version == 0 {
		return 0, fmt.Errorf("restore volume %s: give the version to restore (see its history)", name)
	}
	r, err := pick(name, h, version)
	if err != nil {
		return 0, err
	}
	old, err := v.loadManifest(ctx, name, r)
	if err != nil {
		return 0, err
	}
	cur, err := v.loadManifest(ctx, name, mustCurrent(h))
	if err != nil {
		return 0, err
	}
	sweep := h.Dirty
	if rev, err = v.markDirty(ctx, name, h, rev, false); err != nil {
		return 0, err
	}
	changed, changedBytes := diff(cur.Entries, old.Entries)
	var total int64
	for _, e := range old.Entries {
		total += e.Size
	}
	nm := &manifest{Volume: name, Version: h.Version + 1, Entries: old.Entries}
	rec := versionRec{Time: time.Now().UTC(), JobID: holder, FilesChanged: changed, Bytes: changedBytes,
		Files: len(old.Entries), TotalBytes: total}
	if err := v.publish(ctx, l, name, h, rev, nm, rec, sweep); err != nil {
		return 0, fmt.Errorf("restore version %d of volume %s: %w", version, name, err)
	}
	v.log.Info("restored volume", zap.String("volume", name), zap.Uint64("from", version), zap.Uint64("version", nm.Version), zap.String("holder", holder))
	return nm.Version, nil
}

func mustCurrent(h *head) versionRec {
	r, _ := h.current()
	return r
}

// Remove deletes a volume with all its versions, under its lease.
func (v *Volumes) Remove(ctx context.Context, name, holder string) error {
	if err := checkName(name); err != nil {
		return err
	}
	l, err := v.acquire(ctx, name, holder)
	if err != nil {
		return err
	}
	defer func() {
		if err := l.release(ctx); err != nil {
			v.log.Warn("cannot release volume lease", zap.String("volume", name), zap.Error(err))
		}
	}()
	h, rev, err := v.readHead(ctx, name)
	if err != nil {
		return err
	}
	if h == nil {
		return fmt.Errorf("remove volume %s: %w", name, ErrNotFound)
	}
	// An empty, dirty head first: the volume is gone for readers at once, and if deleting its
	// objects stops half-way, the next commit under this name sweeps the rest.
	if h.Version != 0 || len(h.Versions) > 0 || !h.Dirty {
		if rev, err = v.writeHead(ctx, name, &head{Dirty: true}, rev); err != nil {
			return fmt.Errorf("remove volume %s: %w", name, err)
		}
	}
	// The markers first: a removal that stops half-way must not leave the store offering a
	// version to recover whose objects are partly gone.
	var keys []string
	for _, prefix := range []string{markerPrefix(name), volumePrefix(name)} {
		var some []string
		err = v.storeCall(ctx, "list", prefix, func() error {
			var err error
			some, err = v.b.List(ctx, prefix)
			return err
		})
		if err == nil {
			err = v.deleteAll(ctx, some)
		}
		if err != nil {
			break
		}
		keys = append(keys, some...)
	}
	if err != nil {
		return fmt.Errorf("remove volume %s: it is gone for readers, but deleting its objects failed (run remove again to finish): %w", name, err)
	}
	if err := v.dropStaged(ctx, name); err != nil {
		return fmt.Errorf("remove volume %s: its objects are deleted, but not its staged versions' entries (run remove again to finish): %w", name, err)
	}
	err = v.kvCall(ctx, "delete head of volume", HeadsBucket, name, func() error {
		return v.heads.Delete(ctx, kvKey(name), jetstream.LastRevision(rev))
	})
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		// A delete that timed out may have landed before the retry.
		if h, _, rerr := v.readHead(ctx, name); rerr == nil && h == nil {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("remove volume %s: its objects are deleted, but its head is not: %w", name, err)
	}
	v.log.Info("removed volume", zap.String("volume", name), zap.Int("objects", len(keys)), zap.String("holder", holder))
	return nil
}
