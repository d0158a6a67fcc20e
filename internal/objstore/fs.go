package objstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/jailfs"
)

// prepareDir makes sure rel beneath root is an empty real directory, creating it (and what is
// missing above it) if need be, and opens it: sync-in writes only into a directory nobody else
// has put anything in, so no existing file or link can redirect a write. A link anywhere on
// the way fails with ErrCheckout.
func prepareDir(root *jailfs.Dir, rel string) (*jailfs.Dir, error) {
	info, err := root.Lstat(rel)
	if errors.Is(err, fs.ErrNotExist) {
		if err := root.MkdirAll(rel, 0o755, nil); err != nil {
			return nil, checkoutErr(fmt.Errorf("create volume directory %s: %w", rel, err))
		}
	} else if err != nil {
		return nil, checkoutErr(fmt.Errorf("check volume directory %s: %w", rel, err))
	} else if !info.IsDir() {
		return nil, fmt.Errorf("volume directory %s exists and is not a directory (it is %s); give Mount a fresh directory: %w", rel, info.Mode().Type(), ErrCheckout)
	}
	vd, err := openCheckout(root, rel)
	if err != nil {
		return nil, err
	}
	if names, _ := vd.Readdirnames(1); len(names) > 0 {
		vd.Close()
		return nil, fmt.Errorf("volume directory %s is not empty (it holds %q); give Mount a fresh directory: %w", rel, names[0], ErrCheckout)
	}
	return vd, nil
}

// openCheckout opens the volume's directory rel beneath root, refusing a path through a link.
func openCheckout(root *jailfs.Dir, rel string) (*jailfs.Dir, error) {
	vd, err := root.OpenDir(rel)
	if err != nil {
		return nil, checkoutErr(fmt.Errorf("open volume directory %s: %w", rel, err))
	}
	return vd, nil
}

// checkoutErr marks an error of the job's tree as the job's: a link where the host would have
// followed it, or an entry of the wrong kind.
func checkoutErr(err error) error {
	if errors.Is(err, jailfs.ErrLink) || errors.Is(err, jailfs.ErrNotRegular) {
		return fmt.Errorf("%w: %w", ErrCheckout, err)
	}
	return err
}

// syncIn writes version m of a volume into vd, an empty directory: directories first, then
// files (from the cache, downloading what it lacks), then symlinks, so nothing is ever written
// through a link; directory modes are applied last so that read-only directories can still be
// filled. Every path is resolved beneath vd with no link followed (manifest paths are checked
// when the manifest is loaded, and a link the jail planted meanwhile is refused, not entered).
func (v *Volumes) syncIn(ctx context.Context, name string, vd *jailfs.Dir, m *manifest) (SyncStats, error) {
	var st SyncStats
	own := func(p string) error {
		if v.opts.Owner == nil {
			return nil
		}
		if err := vd.Lchown(p, v.opts.Owner.UID, v.opts.Owner.GID); err != nil {
			return fmt.Errorf("give %s to uid %d gid %d: %w (the host must run as root to set a volume's owner)", p, v.opts.Owner.UID, v.opts.Owner.GID, checkoutErr(err))
		}
		return nil
	}
	if err := own("."); err != nil {
		return st, err
	}
	groups := map[string][]entry{} // files by content, so shared content is fetched once
	var hashes []string
	for _, e := range m.Entries {
		switch e.Type {
		case typeDir:
			if err := vd.Mkdir(e.Path, 0o700); err != nil {
				return st, checkoutErr(fmt.Errorf("create directory %s: %w", e.Path, err))
			}
			if err := own(e.Path); err != nil {
				return st, err
			}
		case typeFile:
			if _, ok := groups[e.Hash]; !ok {
				hashes = append(hashes, e.Hash)
			}
			groups[e.Hash] = append(groups[e.Hash], e)
		}
	}
	fetched := make([]int64, len(hashes)) // bytes downloaded per hash; -1 = not downloaded
	err := parallel(ctx, v.ioWorkers, len(hashes), func(ctx context.Context, i int) error {
		var err error
		fetched[i], err = v.fetchInto(ctx, name, vd, groups[hashes[i]])
		return err
	})
	if err != nil {
		return st, err
	}
	for _, n := range fetched {
		if n >= 0 {
			st.FilesFetched++
			st.BytesFetched += n
		}
	}
	for _, e := range m.Entries {
		if e.Type != typeSymlink {
			continue
		}
		if err := vd.Symlink(e.Target, e.Path); err != nil {
			return st, checkoutErr(fmt.Errorf("create symlink %s: %w", e.Path, err))
		}
		if err := own(e.Path); err != nil {
			return st, err
		}
	}
	for _, e := range slices.Backward(m.Entries) {
		if e.Type == typeDir {
			if err := vd.Chmod(e.Path, fs.FileMode(e.Mode)); err != nil {
				return st, checkoutErr(fmt.Errorf("set the mode of %s: %w", e.Path, err))
			}
		}
	}
	st.Files = len(m.Entries)
	v.m.bytes.WithLabelValues("in").Add(float64(st.BytesFetched))
	v.m.files.WithLabelValues("in").Add(float64(st.FilesFetched))
	return st, nil
}

// fetchInto writes one blob to every file entry that holds it, and returns how many bytes it
// downloaded (-1 when the cache had it). Content read from the cache is hashed on the way:
// a cache file damaged by a crash or the disk is dropped and downloaded again.
func (v *Volumes) fetchInto(ctx context.Context, name string, vd *jailfs.Dir, files []entry) (int64, error) {
	hash := files[0].Hash
	var src *os.File
	downloaded := int64(-1)
	if hash != emptyHash {
		src = v.cache.open(hash)
		if src == nil {
			var err error
			if src, downloaded, err = v.download(ctx, name, hash); err != nil {
				return 0, err
			}
		}
		defer func() { src.Close() }()
	}
	for _, e := range files {
		p := e.Path
		f, err := vd.OpenFile(e.Path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return 0, checkoutErr(fmt.Errorf("create file %s: %w", p, err))
		}
		err = copyVerified(f, src, hash)
		var bad *hashMismatchError
		if errors.As(err, &bad) && downloaded < 0 {
			v.log.Warn("volume cache file is damaged; downloading it again", zap.String("blob", hash), zap.Error(err))
			v.cache.drop(hash)
			src.Close()
			if src, downloaded, err = v.download(ctx, name, hash); err == nil {
				err = copyVerified(f, src, hash)
			}
		}
		if err == nil && v.opts.Owner != nil {
			if err = f.Chown(v.opts.Owner.UID, v.opts.Owner.GID); err != nil {
				err = fmt.Errorf("%w (the host must run as root to set a volume's owner)", err)
			}
		}
		if err == nil {
			err = f.Chmod(fs.FileMode(e.Mode))
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return 0, fmt.Errorf("write file %s of volume %s: %w", p, name, err)
		}
	}
	return downloaded, nil
}

// copyVerified replaces dst's content with src's (from its start) and checks its hash.
func copyVerified(dst, src *os.File, hash string) error {
	if src == nil {
		return nil // empty file
	}
	if _, err := src.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := dst.Truncate(0); err != nil {
		return err
	}
	if _, err := dst.Seek(0, io.SeekStart); err != nil {
		return err
	}
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(dst, h), src); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != hash {
		return &hashMismatchError{want: hash, got: got}
	}
	return nil
}

// download fetches a blob into the cache and returns it open, with its size.
func (v *Volumes) download(ctx context.Context, name, hash string) (*os.File, int64, error) {
	key := blobKey(name, hash)
	var f *os.File
	var n int64
	err := v.storeCall(ctx, "download blob", key, func() error {
		rc, err := v.b.Get(ctx, key)
		if err != nil {
			return err
		}
		defer rc.Close()
		f, n, err = v.cache.put(hash, rc)
		var bad *hashMismatchError
		if errors.As(err, &bad) {
			return permanentError{fmt.Errorf("the stored object does not match its name: %w: %w", err, ErrCorrupt)}
		}
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return nil, 0, fmt.Errorf("volume %s: a blob its current version needs is missing from the store (was it deleted by hand?): %w", name, err)
	}
	return f, n, err
}

// scan lists the checkout vd for a commit without following any symlink and hashes every
// regular file that known cannot vouch for (warm.go). Limits are checked on sizes from the
// walk, before anything is hashed or uploaded, and again on what was hashed. Sockets, FIFOs
// and devices are skipped.
func (v *Volumes) scan(ctx context.Context, name string, vd *jailfs.Dir, known *stamps) ([]entry, int64, error) {
	var entries []entry
	var total int64
	err := vd.Walk(".", func(rel string, info fs.FileInfo) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !utf8.ValidString(rel) {
			return fmt.Errorf("file name %q in volume %s is not valid UTF-8; volumes keep UTF-8 names only: rename it", rel, name)
		}
		e := entry{Path: rel, Mode: uint32(info.Mode().Perm())}
		switch mode := info.Mode(); {
		case mode.IsDir():
			e.Type = typeDir
		case mode.IsRegular():
			e.Type, e.Size = typeFile, info.Size()
			total += e.Size
			e.Hash, _ = known.knownHash(rel, info)
		case mode&fs.ModeSymlink != 0:
			e.Type = typeSymlink
			var err error
			if e.Target, err = vd.Readlink(rel); err != nil {
				return fmt.Errorf("read symlink %s: %w", rel, err)
			}
			if strings.IndexByte(e.Target, 0) >= 0 || !utf8.ValidString(e.Target) {
				return fmt.Errorf("symlink %s in volume %s has a target that is not valid UTF-8", rel, name)
			}
			e.Mode = 0o777
		default:
			v.log.Info("skipping special file in volume", zap.String("volume", name), zap.String("path", rel), zap.String("type", mode.Type().String()))
			return nil
		}
		entries = append(entries, e)
		return v.checkLimits(name, len(entries), total, true)
	})
	if err != nil {
		return nil, 0, checkoutErr(err)
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.Path, b.Path) })

	var files []int // the files to read and hash
	for i, e := range entries {
		if e.Type == typeFile && e.Hash == "" {
			files = append(files, i)
		}
	}
	err = parallel(ctx, v.hashWorkers, len(files), func(ctx context.Context, i int) error {
		e := &entries[files[i]]
		var err error
		e.Hash, e.Size, err = hashFile(vd, e.Path)
		return err
	})
	if err != nil {
		return nil, 0, checkoutErr(err)
	}
	total = 0
	for _, e := range entries {
		total += e.Size
	}
	if err := v.checkLimits(name, len(entries), total, false); err != nil {
		return nil, 0, err
	}
	return entries, total, nil
}

func (v *Volumes) checkLimits(name string, files int, bytes int64, partial bool) error {
	more := ""
	if partial {
		more = "at least "
	}
	if files > v.opts.MaxFiles {
		return fmt.Errorf("%w: volume %s holds %s%d files, directories and symlinks, over its limit of %d (--volume-max-files); nothing was committed",
			ErrLimit, name, more, files, v.opts.MaxFiles)
	}
	if bytes > v.opts.MaxBytes {
		return fmt.Errorf("%w: volume %s holds %s%d bytes of files, over its limit of %d (--volume-max-bytes); nothing was committed",
			ErrLimit, name, more, bytes, v.opts.MaxBytes)
	}
	return nil
}

// hashFile hashes the regular file rel beneath vd, never through a link that may have
// replaced it, nor blocking on a fifo.
func hashFile(vd *jailfs.Dir, rel string) (string, int64, error) {
	f, _, err := vd.OpenRegular(rel)
	if err != nil {
		return "", 0, fmt.Errorf("read %s: %w", rel, err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("read %s: %w", rel, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
