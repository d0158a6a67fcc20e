package deploy

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	udiff "github.com/aymanbagabas/go-udiff"
)

// Diff is a unified diff of deployment a's code to b's, of every function or of fn alone. The
// annotations are part of the source files, so they are diffed with them.
func (s *Store) Diff(ctx context.Context, a, b int, fn string) (string, error) {
	da, err := s.Get(ctx, a)
	if err != nil {
		return "", err
	}
	db, err := s.Get(ctx, b)
	if err != nil {
		return "", err
	}
	names := map[string]bool{}
	for n := range da.Functions {
		names[n] = true
	}
	for n := range db.Functions {
		names[n] = true
	}
	if fn != "" {
		if !names[fn] {
			return "", fmt.Errorf("neither deployment %d nor %d has a function %q", a, b, fn)
		}
		names = map[string]bool{fn: true}
	}
	var out strings.Builder
	for _, name := range slices.Sorted(maps.Keys(names)) {
		va, vb := da.Functions[name], db.Functions[name]
		if va.Hash == vb.Hash {
			continue
		}
		fa, err := s.files(ctx, name, va)
		if err != nil {
			return "", err
		}
		fb, err := s.files(ctx, name, vb)
		if err != nil {
			return "", err
		}
		paths := map[string]bool{}
		for p := range fa {
			paths[p] = true
		}
		for p := range fb {
			paths[p] = true
		}
		for _, p := range slices.Sorted(maps.Keys(paths)) {
			if fa[p] == fb[p] {
				continue
			}
			from, to := "a/"+p, "b/"+p
			if _, ok := fa[p]; !ok {
				from = "/dev/null"
			}
			if _, ok := fb[p]; !ok {
				to = "/dev/null"
			}
			out.WriteString(udiff.Unified(from, to, fa[p], fb[p]))
		}
	}
	return out.String(), nil
}

// files reads a version's files by path; none for the zero Version (the function is absent).
func (s *Store) files(ctx context.Context, name string, v Version) (map[string]string, error) {
	out := map[string]string{}
	if v.Hash == "" {
		return out, nil
	}
	data, err := s.Code(ctx, name, v.Hash)
	if err != nil {
		return nil, err
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("read %s version %s: %w", name, v.Hash, err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read %s version %s: %w", name, v.Hash, err)
		}
		switch h.Typeflag {
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				return nil, err
			}
			out[h.Name] = string(b)
		case tar.TypeSymlink:
			out[h.Name] = "-> " + h.Linkname + "\n"
		}
	}
}
