package jailfs

import (
	"errors"
	"io/fs"
	"path"
	"slices"
)

// Walk calls fn for every entry beneath the directory rel (not for rel itself), parents before
// their contents and names in lexical order, with the entry's path relative to rel and its own
// description (a link is described, never followed). Each directory is entered through an fd
// opened beneath its parent without following a link, so one swapped for a link while the walk
// runs is refused, not entered. fn may return fs.SkipDir for a directory to skip its contents.
func (d *Dir) Walk(rel string, fn func(rel string, info fs.FileInfo) error) error {
	sub, err := d.OpenDir(rel)
	if err != nil {
		return err
	}
	defer sub.Close()
	return sub.walk("", fn)
}

func (d *Dir) walk(prefix string, fn func(rel string, info fs.FileInfo) error) error {
	names, err := d.f.Readdirnames(-1)
	if err != nil {
		return d.pathErr("read directory", ".", err)
	}
	slices.Sort(names)
	for _, name := range names {
		info, err := d.lstatName(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since the directory was read
		}
		if err != nil {
			return err
		}
		p := path.Join(prefix, name)
		err = fn(p, info)
		if info.IsDir() && errors.Is(err, fs.SkipDir) {
			continue
		}
		if err != nil {
			return err
		}
		if !info.IsDir() {
			continue
		}
		sub, err := d.OpenDir(name)
		if err != nil {
			return err
		}
		err = sub.walk(p, fn)
		sub.Close()
		if err != nil {
			return err
		}
	}
	return nil
}
