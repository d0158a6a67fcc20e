// Package voldiff compares two versions of a volume, given as file lists (path, type, mode,
// size, sha256, symlink target), and says per path what a person deciding on the change needs:
// added, removed or changed (content, mode, type, target), with a unified diff for a text file
// and sizes and hashes for a binary or large one.
//
// It is bounded so that a review never hangs on what an agent wrote: a file over
// Options.MaxFileBytes is never opened (its sizes and hashes say enough), a smaller one is read
// once, and the diff text of all files together stops at Options.MaxTextBytes, where Diff.CutAt
// says which file it was cut in.
package voldiff

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"unicode/utf8"
)

// The types of a File.
const (
	TypeFile    = "file"
	TypeDir     = "dir"
	TypeSymlink = "symlink"
)

// File is one entry of a version.
type File struct {
	Path   string      `json:"path"`
	Type   string      `json:"type"` // TypeFile, TypeDir or TypeSymlink
	Mode   fs.FileMode `json:"mode"` // permission bits
	Size   int64       `json:"size,omitempty"`
	SHA256 string      `json:"sha256,omitempty"`
	Target string      `json:"target,omitempty"` // a symlink's
}

// Opener opens a regular file's content. Compare reads at most Options.MaxFileBytes+1 bytes of
// what it returns and closes it.
type Opener func(ctx context.Context, f File) (io.ReadCloser, error)

// Options bound a comparison; zero fields take the defaults.
type Options struct {
	// MaxFileBytes: a file larger than this on either side gets no diff text, and is not read.
	MaxFileBytes int64
	// MaxTextBytes bounds the diff text of all files together.
	MaxTextBytes int
	// Context is the number of unchanged lines around each change.
	Context int
	// MaxFiles bounds the paths listed; those beyond it are counted (Diff.Unlisted), not
	// listed, and not read.
	MaxFiles int
}

// Defaults of Options.
const (
	DefaultMaxFileBytes = 1 << 20
	DefaultMaxTextBytes = 256 << 10
	DefaultContext      = 3
	DefaultMaxFiles     = 500
)

func (o Options) withDefaults() Options {
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = DefaultMaxFileBytes
	}
	if o.MaxTextBytes <= 0 {
		o.MaxTextBytes = DefaultMaxTextBytes
	}
	if o.Context <= 0 {
		o.Context = DefaultContext
	}
	if o.MaxFiles <= 0 {
		o.MaxFiles = DefaultMaxFiles
	}
	return o
}

// The changes of a FileDiff.
const (
	Added   = "added"
	Removed = "removed"
	Changed = "changed"
)

// What of a changed FileDiff changed.
const (
	WhatContent = "content"
	WhatMode    = "mode"
	WhatType    = "type"
	WhatTarget  = "target"
)

// FileDiff is what became of one path.
type FileDiff struct {
	Path   string   `json:"path"`
	Change string   `json:"change"`         // Added, Removed or Changed
	What   []string `json:"what,omitempty"` // of a Changed one: WhatContent, WhatMode, WhatType, WhatTarget
	Old    *File    `json:"old,omitempty"`  // nil when Added
	New    *File    `json:"new,omitempty"`  // nil when Removed
	// Text is the unified diff of a text file's content, "" when there is none to show (Why
	// says why, when it is not plain from the rest).
	Text string `json:"text,omitempty"`
	// Binary: a side holds NUL bytes or is not UTF-8, so only sizes and hashes are shown.
	Binary bool `json:"binary,omitempty"`
	// Why there is no diff text, or only part of it: the file is over the size bound, the
	// total bound was reached, a side could not be read.
	Why string `json:"why,omitempty"`
	// Cut: Text stops where the total bound was reached.
	Cut bool `json:"cut,omitempty"`
}

// Diff is the comparison of two versions, by path.
type Diff struct {
	Files   []FileDiff `json:"files"`
	Added   int        `json:"added"`
	Removed int        `json:"removed"`
	Changed int        `json:"changed"`
	// CutAt is the path whose diff text reached Options.MaxTextBytes: its text is cut there and
	// the files after it have none; "" when every diff text is whole.
	CutAt string `json:"cut_at,omitempty"`
	// TextBytes is the diff text shown, in bytes; MaxTextBytes its bound.
	TextBytes    int `json:"text_bytes"`
	MaxTextBytes int `json:"max_text_bytes"`
	// Unlisted counts the paths beyond Options.MaxFiles: in the counts above, not in Files.
	Unlisted int `json:"unlisted,omitempty"`
}

// Compare lists what changed from old to cur, both sorted by path, reading the content of the
// changed regular files through open (within o's bounds). Only ctx's end is an error: a file that
// cannot be read is shown with sizes and hashes, and Why says what failed.
func Compare(ctx context.Context, old, cur []File, open Opener, o Options) (Diff, error) {
	o = o.withDefaults()
	d := Diff{MaxTextBytes: o.MaxTextBytes}
	i, j := 0, 0
	for i < len(old) || j < len(cur) {
		if err := ctx.Err(); err != nil {
			return Diff{}, fmt.Errorf("compare volume versions: %w", err)
		}
		var fd FileDiff
		switch {
		case j == len(cur) || (i < len(old) && old[i].Path < cur[j].Path):
			fd = FileDiff{Path: old[i].Path, Change: Removed, Old: &old[i]}
			i++
		case i == len(old) || cur[j].Path < old[i].Path:
			fd = FileDiff{Path: cur[j].Path, Change: Added, New: &cur[j]}
			j++
		default:
			what := changed(old[i], cur[j])
			i, j = i+1, j+1
			if len(what) == 0 {
				continue
			}
			fd = FileDiff{Path: old[i-1].Path, Change: Changed, What: what, Old: &old[i-1], New: &cur[j-1]}
		}
		d.count(fd.Change)
		if len(d.Files) == o.MaxFiles {
			d.Unlisted++
			continue
		}
		d.text(ctx, &fd, open, o)
		d.Files = append(d.Files, fd)
	}
	return d, nil
}

func (d *Diff) count(change string) {
	switch change {
	case Added:
		d.Added++
	case Removed:
		d.Removed++
	default:
		d.Changed++
	}
}

// changed says what differs between two entries of one path.
func changed(a, b File) []string {
	var what []string
	if a.Type != b.Type {
		return []string{WhatType}
	}
	if a.SHA256 != b.SHA256 || a.Size != b.Size {
		what = append(what, WhatContent)
	}
	if a.Target != b.Target {
		what = append(what, WhatTarget)
	}
	if a.Mode != b.Mode {
		what = append(what, WhatMode)
	}
	return what
}

// text fills fd's diff text when both sides are (or were) regular text files within the bounds.
func (d *Diff) text(ctx context.Context, fd *FileDiff, open Opener, o Options) {
	if !contentShown(fd) {
		return
	}
	for _, f := range []*File{fd.Old, fd.New} {
		if f != nil && f.Size > o.MaxFileBytes {
			fd.Why = fmt.Sprintf("over %s: no diff text, only sizes and hashes", Size(o.MaxFileBytes))
			return
		}
	}
	if d.CutAt != "" {
		fd.Why = fmt.Sprintf("not shown: the diff text reached its bound of %s at %s", Size(int64(o.MaxTextBytes)), d.CutAt)
		return
	}
	before, err := read(ctx, open, fd.Old, o.MaxFileBytes)
	if err == nil {
		var after string
		if after, err = read(ctx, open, fd.New, o.MaxFileBytes); err == nil {
			fd.Text = unified(fd, before, after, o.Context)
		}
	}
	if err != nil {
		if err == errBinary {
			fd.Binary = true
		} else {
			fd.Why = "no diff text: " + err.Error()
		}
		return
	}
	d.bound(fd)
}

// contentShown: the change is to a regular file's content, added or removed whole included.
func contentShown(fd *FileDiff) bool {
	for _, f := range []*File{fd.Old, fd.New} {
		if f != nil && f.Type != TypeFile {
			return false
		}
	}
	return fd.Change != Changed || fd.What[0] == WhatContent
}

// bound keeps the total diff text within its bound, cutting fd's at a line end.
func (d *Diff) bound(fd *FileDiff) {
	room := d.MaxTextBytes - d.TextBytes
	if len(fd.Text) > room {
		cut := strings.LastIndexByte(fd.Text[:room], '\n') + 1
		fd.Text, fd.Cut, d.CutAt = fd.Text[:cut], true, fd.Path
		fd.Why = fmt.Sprintf("cut: the diff text reached its bound of %s here", Size(int64(d.MaxTextBytes)))
	}
	d.TextBytes += len(fd.Text)
}

var errBinary = fmt.Errorf("binary")

// read returns a side's text: "" for a missing side, errBinary for content that is not text.
func read(ctx context.Context, open Opener, f *File, limit int64) (string, error) {
	if f == nil || f.Size == 0 {
		return "", nil
	}
	rc, err := open(ctx, *f)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", f.Path, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", f.Path, err)
	}
	if int64(len(b)) > limit {
		return "", fmt.Errorf("%s holds more than its recorded %d bytes", f.Path, f.Size)
	}
	if bytes.IndexByte(b, 0) >= 0 || !utf8.Valid(b) {
		return "", errBinary
	}
	return string(b), nil
}

// Size says n bytes the way a person reads them: 512 B, 1.5 KiB, 100 MiB.
func Size(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	s := fmt.Sprintf("%.1f", float64(n)/float64(div))
	return strings.TrimSuffix(s, ".0") + " " + "KMGTPE"[exp:exp+1] + "iB"
}
