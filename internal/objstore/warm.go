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

// takeStamps records the files of entries as they are now in root.
func takeStamps(root string, entries []entry) (*stamps, error) {
	s := &stamps{Files: make(map[string]stampedFile, len(entries))}
	for _, e := range entries {
		if e.Type != typeFile {
			continue
		}
		info, err := os.Lstat(filepath.Join(root, filepath.FromSlash(e.Path)))
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

func (v *Volumes) warmDir(name string) string {
	return filepath.Join(v.opts.CacheDir, "checkouts", kvKey(name))
}

// stash moves a committed checkout aside for the next run of the same volume on this host.
// It is best effort: anything that goes wrong only costs the next run a copy from the cache.
func (v *Volumes) stash(name, dir string, version uint64, s *stamps) {
	if s == nil {
		return
	}
	target := v.warmDir(name)
	state, err := json.Marshal(warmState{Version: version, Stamps: s})
	if err == nil {
		err = os.MkdirAll(filepath.Dir(target), 0o700)
	}
	if err == nil {
		_ = os.RemoveAll(target)
		_ = os.Remove(target + ".json")
		err = os.Rename(dir, target)
	}
	if err == nil {
		err = os.WriteFile(target+".json", state, 0o600)
	}
	if err != nil {
		_ = os.RemoveAll(target)
		v.log.Debug("no warm checkout kept", zap.String("volume", name), zap.Error(err))
	}
}

// unstash gives dir the warm checkout of version m if this host has one that is intact, and
// returns its stamps; otherwise it returns nil and dir is left for an ordinary sync-in.
func (v *Volumes) unstash(name, dir string, m *manifest) *stamps {
	src := v.warmDir(name)
	raw, err := os.ReadFile(src + ".json")
	if err != nil {
		return nil
	}
	// Whatever happens next, a warm checkout is used at most once.
	_ = os.Remove(src + ".json")
	var state warmState
	if json.Unmarshal(raw, &state) != nil || state.Version != m.Version || state.Stamps == nil {
		_ = os.RemoveAll(src)
		return nil
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		_ = os.RemoveAll(src)
		return nil // dir is not empty or not ours to replace: sync-in will say so
	}
	if err := os.Rename(src, dir); err != nil {
		_ = os.RemoveAll(src)
		return nil
	}
	if err := v.matches(dir, m, state.Stamps); err != nil {
		v.log.Info("warm checkout does not match its version; syncing from the cache instead", zap.String("volume", name), zap.Error(err))
		if rerr := os.RemoveAll(dir); rerr != nil {
			return nil
		}
		return nil
	}
	return state.Stamps
}

// matches checks that dir holds exactly what manifest m lists, files unchanged since s.
func (v *Volumes) matches(dir string, m *manifest, s *stamps) error {
	want := make(map[string]entry, len(m.Entries))
	for _, e := range m.Entries {
		want[e.Path] = e
	}
	seen := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		e, ok := want[rel]
		if !ok {
			return fmt.Errorf("%s is not in version %d", rel, m.Version)
		}
		seen++
		info, err := d.Info()
		if err != nil {
			return err
		}
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
			if target, err := os.Readlink(p); err != nil || target != e.Target {
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
