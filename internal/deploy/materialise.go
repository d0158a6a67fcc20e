package deploy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/agenthost/host/internal/functions"
)

// Materialise writes deployment d as a functions directory, root/<number>, once, and returns
// it. Each version's content hash is verified: a corrupt or missing object is an error, and the
// directory is not made, so that a host keeps what it serves.
func (s *Store) Materialise(ctx context.Context, d *Deployment, root string) (string, error) {
	dir := filepath.Join(root, strconv.Itoa(d.Number))
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(root, 0o750); err != nil {
		return "", fmt.Errorf("materialise deployment %d: %w", d.Number, err)
	}
	tmp, err := os.MkdirTemp(root, ".tmp-"+strconv.Itoa(d.Number)+"-")
	if err != nil {
		return "", fmt.Errorf("materialise deployment %d: %w", d.Number, err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	for name, v := range d.Functions {
		data, err := s.Code(ctx, name, v.Hash)
		if err != nil {
			return "", fmt.Errorf("deployment %d: %w", d.Number, err)
		}
		if err := Unpack(data, tmp, name); err != nil {
			return "", fmt.Errorf("deployment %d: %w", d.Number, err)
		}
	}
	fns, _ := functions.Load(tmp)
	for name, v := range d.Functions {
		if f, ok := fns[name]; ok && f.Hash != v.Hash {
			return "", fmt.Errorf("deployment %d: version %s of %s in %s unpacks to content hashed %s: the object is corrupt: delete the object %s/%s from %s, then deploy again",
				d.Number, v.Hash, name, CodeBucket, f.Hash, name, v.Hash, CodeBucket)
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, statErr := os.Stat(dir); statErr == nil {
			return dir, nil
		}
		return "", fmt.Errorf("materialise deployment %d: %w", d.Number, err)
	}
	return dir, nil
}

// Function writes one function version alone, root/<name>-<hash>/<file>, once, and loads it:
// what a step pinned to an older deployment runs.
func (s *Store) Function(ctx context.Context, name string, v Version, root string) (*functions.Function, error) {
	dir := filepath.Join(root, name+"-"+v.Hash)
	if _, err := os.Stat(dir); err != nil {
		if err := os.MkdirAll(root, 0o750); err != nil {
			return nil, err
		}
		tmp, err := os.MkdirTemp(root, ".tmp-"+name+"-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		data, err := s.Code(ctx, name, v.Hash)
		if err != nil {
			return nil, err
		}
		if err := Unpack(data, tmp, name); err != nil {
			return nil, err
		}
		if err := os.Rename(tmp, dir); err != nil {
			if _, statErr := os.Stat(dir); statErr != nil {
				return nil, err
			}
		}
	}
	fns, errs := functions.Load(dir)
	f, ok := fns[name]
	if !ok {
		return nil, fmt.Errorf("version %s of %s does not load: %v", v.Hash, name, errs)
	}
	if f.Hash != v.Hash {
		return nil, fmt.Errorf("version %s of %s in %s unpacks to content hashed %s: the object is corrupt: delete the object %s/%s from %s, then deploy again", v.Hash, name, CodeBucket, f.Hash, name, v.Hash, CodeBucket)
	}
	return f, nil
}

// Pull writes the current deployment's functions into dir, which must not hold any of them
// yet: `host pull` for a checkout under version control.
func (s *Store) Pull(ctx context.Context, d *Deployment, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("pull deployment %d: %w", d.Number, err)
	}
	for name, v := range d.Functions {
		if _, err := os.Lstat(filepath.Join(dir, filepath.Clean(v.File))); err == nil {
			return fmt.Errorf("pull deployment %d: %s already exists in %s: pull into an empty directory, or remove it first", d.Number, v.File, dir)
		}
		data, err := s.Code(ctx, name, v.Hash)
		if err != nil {
			return fmt.Errorf("pull deployment %d: %w", d.Number, err)
		}
		if err := Unpack(data, dir, name); err != nil {
			return fmt.Errorf("pull deployment %d: %w", d.Number, err)
		}
	}
	return nil
}
