package objstore

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"

	"github.com/agenthost/host/internal/voldiff"
)

// ErrVersionGone is in the error of a diff whose version's manifest is not in the store: a
// staged version that was discarded, or a version collected since.
var ErrVersionGone = errors.New("the version is gone from the store")

// DiffVersions compares version base of volume name (0: the empty volume, for a volume the
// step made) with version, whose manifest's sha256 is manifest: a committed version, or a
// staged one, whose manifest is stored at the key a committed version's has. Base is a kept
// version; version need not be in the head at all. Content is read only for changed text files
// within o's bounds (voldiff), and checked against its hash. No lease is taken: versions are
// immutable.
func (v *Volumes) DiffVersions(ctx context.Context, name string, base, version uint64, manifest string, o voldiff.Options) (voldiff.Diff, error) {
	if err := checkName(name); err != nil {
		return voldiff.Diff{}, err
	}
	if !validHash(manifest) {
		return voldiff.Diff{}, fmt.Errorf("version %d of volume %s: manifest %q is not a sha256", version, name, manifest)
	}
	var old []voldiff.File
	if base != 0 {
		h, _, err := v.headOf(ctx, name)
		if err != nil {
			return voldiff.Diff{}, fmt.Errorf("read version %d of volume %s, the one the change is against: %w", base, name, err)
		}
		r, err := pick(name, h, base)
		if err != nil {
			return voldiff.Diff{}, fmt.Errorf("the version the change is against is no longer kept: %w", err)
		}
		m, err := v.loadManifest(ctx, name, r)
		if err != nil {
			return voldiff.Diff{}, err
		}
		old = diffFiles(m)
	}
	m, err := v.loadManifest(ctx, name, versionRec{Version: version, Manifest: manifest})
	if errors.Is(err, ErrNotFound) {
		return voldiff.Diff{}, fmt.Errorf("version %d of volume %s (manifest %.12s): %w: a staged version is removed when its step is rejected or times out, and an old one is collected: %w",
			version, name, manifest, ErrVersionGone, err)
	}
	if err != nil {
		return voldiff.Diff{}, err
	}
	if m.Volume != name || m.Version != version {
		return voldiff.Diff{}, fmt.Errorf("manifest %.12s says volume %s version %d, not volume %s version %d: %w", manifest, m.Volume, m.Version, name, version, ErrCorrupt)
	}
	open := func(ctx context.Context, f voldiff.File) (io.ReadCloser, error) { return v.openBlob(ctx, name, f) }
	return voldiff.Compare(ctx, old, diffFiles(m), open, o)
}

func diffFiles(m *manifest) []voldiff.File {
	out := make([]voldiff.File, len(m.Entries))
	for i, e := range m.Entries {
		out[i] = voldiff.File{Path: e.Path, Type: e.Type, Mode: fs.FileMode(e.Mode), Size: e.Size, SHA256: e.Hash, Target: e.Target}
	}
	return out
}

// openBlob opens a file's content from the cache, or streams it from the store (without
// filling the cache: a diff reads a file once). Read to its end, it fails unless the content
// is the one the manifest names.
func (v *Volumes) openBlob(ctx context.Context, name string, f voldiff.File) (io.ReadCloser, error) {
	if !validHash(f.SHA256) {
		return nil, fmt.Errorf("%s of volume %s: hash %q is not a sha256: %w", f.Path, name, f.SHA256, ErrCorrupt)
	}
	if v.cache != nil {
		if c := v.cache.open(f.SHA256); c != nil {
			return &verified{rc: c, h: sha256.New(), want: f.SHA256, path: f.Path}, nil
		}
	}
	key := blobKey(name, f.SHA256)
	var rc io.ReadCloser
	err := v.storeCall(ctx, "download blob", key, func() error {
		var err error
		rc, err = v.b.Get(ctx, key)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s of volume %s: %w", f.Path, name, err)
	}
	return &verified{rc: rc, h: sha256.New(), want: f.SHA256, path: f.Path}, nil
}

// verified hashes what is read and, at the end, fails unless it is what was named.
type verified struct {
	rc   io.ReadCloser
	h    hash.Hash
	want string
	path string
}

func (r *verified) Read(p []byte) (int, error) {
	n, err := r.rc.Read(p)
	r.h.Write(p[:n])
	if err == io.EOF {
		if got := hexSum(r.h); got != r.want {
			return n, fmt.Errorf("%s: %w: %w", r.path, &hashMismatchError{want: r.want, got: got}, ErrCorrupt)
		}
	}
	return n, err
}

func (r *verified) Close() error { return r.rc.Close() }
