package objstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/jailfs"
)

// A rerun with nothing changed should cost next to nothing. Two things make it so:
//
//   - Stamps. A file's inode, size, modification time and change time are recorded when it is
//     checked out and after each commit. The change time is set by the kernel on every write,
//     chmod or rename and cannot be set by a process (the jail cannot change the clock either),
//     so a file whose stamp is unchanged has not been written since: its recorded hash stands
//     and it is not read again. Size or modification time alone would miss a same-size edit
//     with the old mtime restored; the change time does not. As git does for its index, a file
//     whose change time falls within racyWindow of when the stamps were taken is hashed all the
//     same, because the clock may not have ticked between the stamp and a write.
//
//   - Warm checkouts. After a successful commit, the job's copy of the volume is moved aside
//     (renamed, not copied) and the next run on this host that mounts the same version gets it
//     back by another rename, after checking every entry against the manifest and its stamps.
//     A run that failed leaves no warm copy: what it changed was never committed.

// racyWindow covers the coarse clock that file times are taken from.
const racyWindow = 50 * time.Millisecond

// stamp identifies the state of a file without reading it.
type stamp struct {
	Ino   uint64 `json:"ino"`
	Size  int64  `json:"size"`
	Mtime int64  `json:"mtime"`
	Ctime int64  `json:"ctime"`
	UID   uint32 `json:"uid"`
	GID   uint32 `json:"gid"`
}

func stampOf(info fs.FileInfo) (stamp, bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return stamp{}, false
	}
	return stamp{Ino: st.Ino, Size: st.Size, Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano(), UID: st.Uid, GID: st.Gid}, true
}

// stamps are the known files of a checkout: their stamps and content hashes.
type stamps struct {
	At    int64                  `json:"at"` // when they were taken, Unix nanoseconds
	Files map[string]stampedFile `json:"files"`
}

type stampedFile struct {
	Stamp stamp  `json:"stamp"`
	Hash  string `json:"sha256"`
}

// takeStamps records the files of entries as they are now in the checkout vd.
func takeStamps(vd *jailfs.Dir, entries []entry) (*stamps, error) {
	s := &stamps{Files: make(map[string]stampedFile, len(entries))}
	for _, e := range entries {
		if e.Type != typeFile {
			continue
		}
		info, err := vd.Lstat(e.Path)
		if err != nil {
			return nil, err
		}
		st, ok := stampOf(info)
		if !ok || !info.Mode().IsRegular() {
			return nil, fmt.Errorf("%s is not a regular file", e.Path)
		}
		s.Files[e.Path] = stampedFile{Stamp: st, Hash: e.Hash}
	}
	s.At = time.Now().UnixNano()
	return s, nil
}

// knownHash returns the recorded hash of the file at path if its stamp says it has not been
// written since the stamps were taken.
func (s *stamps) knownHash(path string, info fs.FileInfo) (string, bool) {
	if s == nil {
		return "", false
	}
	k, ok := s.Files[path]
	if !ok {
		return "", false
	}
	st, ok := stampOf(info)
	if !ok || st != k.Stamp || st.Ctime >= s.At-racyWindow.Nanoseconds() {
		return "", false
	}
	return k.Hash, true
}

// warmState is what is kept beside a warm checkout.
type warmState struct {
	Version uint64  `json:"version"`
	Stamps  *stamps `json:"stamps"`
}

// checkouts opens the directory holding this host's warm checkouts, creating it if need be.
func (v *Volumes) checkouts() (*jailfs.Dir, error) {
	dir := filepath.Join(v.opts.CacheDir, "checkouts")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return jailfs.Open(dir)
}

// stash moves a committed checkout (rel beneath the job's tree root) aside for the next run of
// the same volume on this host. It is best effort: anything that goes wrong only costs the
// next run a copy from the cache. A checkout on a bounded job tree of its own (jailfs.Tree)
// is on another file system and cannot be renamed: it is not kept.
func (v *Volumes) stash(name string, root *jailfs.Dir, rel string, version uint64, s *stamps) {
	if s == nil {
		return
	}
	key := kvKey(name)
	state, err := json.Marshal(warmState{Version: version, Stamps: s})
	if err != nil {
		return
	}
	cd, err := v.checkouts()
	if err == nil && !sameFileSystem(root, cd) {
		// A bounded job tree is a file system of its own (jailfs.Tree): a rename out of it
		// cannot work, so none is tried, and no earlier copy is removed for it.
		cd.Close()
		err = syscall.EXDEV
	}
	if err == nil {
		defer cd.Close()
		_ = cd.RemoveAll(key)
		_ = cd.Remove(key + ".json")
		err = root.Rename(rel, cd, key)
		if err == nil {
			err = cd.WriteFile(key+".json", state, 0o600)
		}
		if err != nil {
			_ = cd.RemoveAll(key)
		}
	}
	if err != nil {
		v.log.Debug("no warm checkout kept", zap.String("volume", name), zap.Bool("other_file_system", errors.Is(err, syscall.EXDEV)), zap.Error(err))
	}
}

// sameFileSystem reports whether two directories are on one file system, where a rename
// between them can work.
func sameFileSystem(a, b *jailfs.Dir) bool {
	ai, aerr := a.Lstat(".")
	bi, berr := b.Lstat(".")
	if aerr != nil || berr != nil {
		return false
	}
	as, aok := ai.Sys().(*syscall.Stat_t)
	bs, bok := bi.Sys().(*syscall.Stat_t)
	return aok && bok && as.Dev == bs.Dev
}

// unstash gives rel beneath root the warm checkout of version m if this host has one that is
// intact, and returns its stamps; otherwise it returns nil and rel is left for an ordinary
// sync-in.
func (v *Volumes) unstash(name string, root *jailfs.Dir, rel string, m *manifest) *stamps {
	key := kvKey(name)
	raw, err := os.ReadFile(filepath.Join(v.opts.CacheDir, "checkouts", key+".json"))
	if err != nil {
		return nil
	}
	cd, err := v.checkouts()
	if err != nil {
		return nil
	}
	defer cd.Close()
	// Whatever happens next, a warm checkout is used at most once.
	_ = cd.Remove(key + ".json")
	var state warmState
	if json.Unmarshal(raw, &state) != nil || state.Version != m.Version || state.Stamps == nil {
		_ = cd.RemoveAll(key)
		return nil
	}
	if err := root.Remove(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
		_ = cd.RemoveAll(key)
		return nil // rel is not empty or not ours to replace: sync-in will say so
	}
	if err := cd.Rename(key, root, rel); err != nil {
		_ = cd.RemoveAll(key)
		return nil
	}
	vd, err := root.OpenDir(rel)
	if err == nil {
		err = v.matches(vd, m, state.Stamps)
		vd.Close()
	}
	if err != nil {
		v.log.Info("warm checkout does not match its version; syncing from the cache instead", zap.String("volume", name), zap.Error(err))
		_ = root.RemoveAll(rel)
		return nil
	}
	return state.Stamps
}

// matches checks that the checkout vd holds exactly what manifest m lists, files unchanged
// since s.
func (v *Volumes) matches(vd *jailfs.Dir, m *manifest, s *stamps) error {
	want := make(map[string]entry, len(m.Entries))
	for _, e := range m.Entries {
		want[e.Path] = e
	}
	seen := 0
	err := vd.Walk(".", func(rel string, info fs.FileInfo) error {
		e, ok := want[rel]
		if !ok {
			return fmt.Errorf("%s is not in version %d", rel, m.Version)
		}
		seen++
		switch e.Type {
		case typeFile:
			// Exact stamps, without the racy window: since they were taken only the host has
			// touched the warm copy, by renaming its directory, which changes no file.
			k, known := s.Files[rel]
			st, ok := stampOf(info)
			if !known || !ok || st != k.Stamp || k.Hash != e.Hash || !info.Mode().IsRegular() || uint32(info.Mode().Perm()) != e.Mode {
				return fmt.Errorf("%s changed", rel)
			}
		case typeDir:
			if !info.IsDir() || uint32(info.Mode().Perm()) != e.Mode {
				return fmt.Errorf("%s changed", rel)
			}
		case typeSymlink:
			if target, err := vd.Readlink(rel); err != nil || target != e.Target {
				return fmt.Errorf("%s changed", rel)
			}
		}
		if o := v.opts.Owner; o != nil {
			if st, ok := stampOf(info); !ok || st.UID != uint32(o.UID) || st.GID != uint32(o.GID) {
				return fmt.Errorf("%s has another owner", rel)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if seen != len(m.Entries) {
		return fmt.Errorf("%d of %d entries are missing", len(m.Entries)-seen, len(m.Entries))
	}
	return nil
}
