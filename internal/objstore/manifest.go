package objstore

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"
)

// Entry types in a manifest.
const (
	typeFile    = "file"
	typeDir     = "dir"
	typeSymlink = "symlink"
)

// emptyHash is the sha256 of no bytes. Empty files are never stored as blobs.
const emptyHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// manifest lists everything in one version of a volume, sorted by path.
type manifest struct {
	Volume  string  `json:"volume"`
	Version uint64  `json:"version"`
	Entries []entry `json:"entries"`
}

// entry is one file, directory or symlink. Paths are slash-separated and relative to the
// volume's root; Mode holds permission bits only (no setuid, setgid or sticky bits).
type entry struct {
	Path   string `json:"path"`
	Type   string `json:"type"`
	Mode   uint32 `json:"mode"`
	Size   int64  `json:"size,omitempty"`
	Hash   string `json:"sha256,omitempty"`
	Target string `json:"target,omitempty"`
}

// same reports whether e and o describe the same content.
func (e entry) same(o entry) bool {
	return e.Type == o.Type && e.Mode == o.Mode && e.Hash == o.Hash && e.Target == o.Target && e.Size == o.Size
}

// head is the mutable pointer to a volume's current version and its kept history, stored as
// one KeyValue entry so that a commit is one compare-and-set.
type head struct {
	Version  uint64       `json:"version"`
	Versions []versionRec `json:"versions"` // oldest first
	// Dirty says the volume's prefix may hold objects no kept version references (a commit
	// failed after uploading, or a removal stopped half-way): the next commit sweeps them.
	Dirty bool `json:"dirty,omitempty"`
	// Staged counts the volume's staged versions (stage.go), so that a collection lists them
	// only when there may be some (a listing costs a KeyValue consumer, most of a commit's
	// time). It is raised before a stage uploads anything and lowered only after a staged entry
	// is gone, so it may be too high after a crash (a listing for nothing) but never too low.
	Staged int `json:"staged,omitempty"`
}

type versionRec struct {
	Version      uint64    `json:"version"`
	Time         time.Time `json:"time"`
	JobID        string    `json:"job_id"`
	FilesChanged int       `json:"files_changed"`
	Bytes        int64     `json:"bytes"`
	Files        int       `json:"files"`
	TotalBytes   int64     `json:"total_bytes"`
	// Manifest is the sha256 of the manifest object, part of its key: a key that names the
	// content can never be overwritten by a run that lost its lease mid-commit.
	Manifest string `json:"manifest"`
}

func (h *head) find(version uint64) (versionRec, bool) {
	for _, r := range h.Versions {
		if r.Version == version {
			return r, true
		}
	}
	return versionRec{}, false
}

func (h *head) current() (versionRec, bool) {
	if h == nil || h.Version == 0 {
		return versionRec{}, false
	}
	return h.find(h.Version)
}

// keptRange describes the kept versions for error messages.
func (h *head) keptRange() string {
	if h == nil || len(h.Versions) == 0 {
		return "none"
	}
	return fmt.Sprintf("%d to %d", h.Versions[0].Version, h.Versions[len(h.Versions)-1].Version)
}

// Object keys. Blobs are scoped per volume so collecting one volume's garbage never has to
// consider another's references.
func volumePrefix(name string) string   { return "volumes/" + name + "/" }
func blobKey(name, hash string) string  { return volumePrefix(name) + "blobs/" + hash }
func manifestPrefix(name string) string { return volumePrefix(name) + "manifests/" }
func manifestKey(name string, r versionRec) string {
	return fmt.Sprintf("%s%020d-%s.json", manifestPrefix(name), r.Version, r.Manifest)
}

// safeName is the caller's rule for volume names, checked again here because names become
// object keys and KeyValue keys.
var safeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,253}[A-Za-z0-9]$`)

func checkName(name string) error {
	if !safeName.MatchString(name) {
		return fmt.Errorf("volume name %q is not valid: it must be 2 to 255 letters, digits, '.', '_' or '-', starting and ending with a letter or digit", name)
	}
	return nil
}

// kvKey maps a volume name onto a KeyValue key. Keys may not contain "..", which volume names
// may; such names have every '.' replaced by '=', a character names never contain, so the
// mapping stays one-to-one and most names are their own key.
func kvKey(name string) string {
	if strings.Contains(name, "..") {
		return strings.ReplaceAll(name, ".", "=")
	}
	return name
}

func nameFromKey(key string) string { return strings.ReplaceAll(key, "=", ".") }

func encodeManifest(m *manifest) (data []byte, hash string, err error) {
	data, err = json.Marshal(m)
	if err != nil {
		return nil, "", fmt.Errorf("encode manifest of volume %s: %w", m.Volume, err)
	}
	sum := sha256.Sum256(data)
	return data, hex.EncodeToString(sum[:]), nil
}

// validate checks a manifest read from the store before anything is written from it: it
// comes from outside this process, and a crafted one must not write outside the target
// directory. Every path must be relative, clean and unique; every parent must be a directory
// listed earlier (so never a symlink, which would redirect the writes below it).
func (m *manifest) validate() error {
	types := make(map[string]string, len(m.Entries))
	prev := ""
	for i, e := range m.Entries {
		if err := checkPath(e.Path); err != nil {
			return err
		}
		if i > 0 && e.Path <= prev {
			return fmt.Errorf("manifest entries are not sorted and unique at %q", e.Path)
		}
		prev = e.Path
		if dir := path.Dir(e.Path); dir != "." {
			switch types[dir] {
			case typeDir:
			case typeSymlink:
				return fmt.Errorf("manifest path %q is below %q, which is a symlink: refusing to write through a link", e.Path, dir)
			case "":
				return fmt.Errorf("manifest path %q has no directory entry for its parent %q", e.Path, dir)
			default:
				return fmt.Errorf("manifest path %q is below %q, which is a %s", e.Path, dir, types[dir])
			}
		}
		if e.Mode&^0o777 != 0 {
			return fmt.Errorf("manifest path %q has mode %o; only permission bits are allowed", e.Path, e.Mode)
		}
		switch e.Type {
		case typeFile:
			if !validHash(e.Hash) || e.Size < 0 {
				return fmt.Errorf("manifest file %q has a bad hash %q or size %d", e.Path, e.Hash, e.Size)
			}
		case typeDir:
		case typeSymlink:
			if e.Target == "" || strings.IndexByte(e.Target, 0) >= 0 {
				return fmt.Errorf("manifest symlink %q has a bad target %q", e.Path, e.Target)
			}
		default:
			return fmt.Errorf("manifest path %q has unknown type %q", e.Path, e.Type)
		}
		types[e.Path] = e.Type
	}
	return nil
}

// checkPath accepts a relative, clean, slash-separated path that stays inside its root.
func checkPath(p string) error {
	switch {
	case p == "" || p == ".":
		return fmt.Errorf("manifest has an empty path")
	case strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("manifest path %q contains a NUL byte", p)
	case !utf8.ValidString(p):
		return fmt.Errorf("manifest path %q is not valid UTF-8", p)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("manifest path %q is absolute", p)
	case path.Clean(p) != p:
		return fmt.Errorf("manifest path %q is not clean", p)
	case p == ".." || strings.HasPrefix(p, "../"):
		return fmt.Errorf("manifest path %q leaves the volume", p)
	}
	return nil
}
