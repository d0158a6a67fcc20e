package objstore

import (
	"context"
	"io/fs"
	"time"
)

// VolumeInfo describes a volume by its latest version.
type VolumeInfo struct {
	Name    string    `json:"name"`
	Version uint64    `json:"version"`
	Files   int       `json:"files"`
	Bytes   int64     `json:"bytes"`
	Updated time.Time `json:"updated"`
	LastJob string    `json:"last_job"`
	// Versions counts the kept versions.
	Versions int `json:"versions"`
}

func infoOf(name string, h *head) VolumeInfo {
	r, _ := h.current()
	return VolumeInfo{Name: name, Version: r.Version, Files: r.Files, Bytes: r.TotalBytes, Updated: r.Time, LastJob: r.JobID, Versions: len(h.Versions)}
}

// Infos describes every volume that has at least one version, sorted by name. It reads the
// heads only, never a manifest.
func (v *Volumes) Infos(ctx context.Context) ([]VolumeInfo, error) {
	heads, err := v.allHeads(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]VolumeInfo, len(heads))
	for i := range heads {
		out[i] = infoOf(heads[i].name, &heads[i].head)
	}
	return out, nil
}

// Info describes one volume; the error wraps ErrNotFound when it has no version.
func (v *Volumes) Info(ctx context.Context, name string) (VolumeInfo, error) {
	h, _, err := v.headOf(ctx, name)
	if err != nil {
		return VolumeInfo{}, err
	}
	return infoOf(name, h), nil
}

// FileInfo is one entry of a version of a volume.
type FileInfo struct {
	Path string      `json:"path"`
	Type string      `json:"type"` // file, dir or symlink
	Mode fs.FileMode `json:"mode"` // permission bits
	Size int64       `json:"size"`
	// Target is a symlink's target.
	Target string `json:"target,omitempty"`
}

// Files lists the entries of a version (0 = the latest), sorted by path, and says which
// version it listed.
func (v *Volumes) Files(ctx context.Context, name string, version uint64) (uint64, []FileInfo, error) {
	h, _, err := v.headOf(ctx, name)
	if err != nil {
		return 0, nil, err
	}
	r, err := pick(name, h, version)
	if err != nil {
		return 0, nil, err
	}
	m, err := v.loadManifest(ctx, name, r)
	if err != nil {
		return 0, nil, err
	}
	out := make([]FileInfo, len(m.Entries))
	for i, e := range m.Entries {
		out[i] = FileInfo{Path: e.Path, Type: e.Type, Mode: fs.FileMode(e.Mode), Size: e.Size, Target: e.Target}
	}
	return r.Version, out, nil
}
