package packages

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agenthost/host/internal/manifest"
)

// Needs reports whether the function whose code is in codeDir, with entry
// file entry (relative to codeDir), needs packages, and from which manager:
//
//   - .py entries need pip when codeDir/requirements.txt names at least one
//     requirement. The content key is requirements.txt, the python version
//     and platform, pip's version, and the index and find-links options (a
//     find-links directory counts by its path, not its content), and the
//     wheels inside codeDir that it names.
//   - .ts .tsx .mts .cts .js .jsx .mjs .cjs entries need Bun when
//     codeDir/package.json declares dependencies (or optionalDependencies);
//     the key is package.json, bun.lock or bun.lockb if present, the local
//     folders and tarballs inside codeDir that they name, and Bun's version.
//     Without a package.json, or with one declaring no dependency,
//     they need Bun when the entry, or a local module it imports, has a bare
//     import that is not a built-in: Bun's transpiler finds the imports and
//     Bun lists its built-ins (see scan.mjs and packageName). A file that
//     does not parse is then an error naming it, its line and column, that
//     wraps a *runtimes.DefinitionError (no retry can fix it). The packages are then
//     installed at "latest" and the key holds only their names and Bun's
//     version: the first install pins them until the cache is cleared, and a
//     package.json is the way to choose or upgrade versions.
//
// The registry in use (Options.NpmRegistry, PipIndexURL) is part of every key.
// Needs scans with the bun on the PATH.
func Needs(codeDir, entry string) (need bool, kind Kind, err error) {
	s, err := inspect(context.Background(), bunOnPath, codeDir, entry)
	if err != nil || s == nil {
		return false, "", err
	}
	return true, s.kind, nil
}

// source is what a function needs installed, read from its code folder.
type source struct {
	kind  Kind
	pkgs  []string          // names, for messages (and the key of generated installs)
	files map[string][]byte // files to write into the install directory
	// locals are the paths inside the function folder (relative, cleaned) that the
	// manifests name as sources: copied into the install directory, and hashed into the key.
	locals   []string
	declared bool // bun: package.json from the function folder
}

func (s *source) describe() string {
	what := "npm packages"
	if s.kind == Pip {
		what = "Python packages"
	}
	names := strings.Join(s.pkgs, ", ")
	if len(names) > 200 {
		names = names[:200] + "…"
	}
	return what + " " + names
}

func inspect(ctx context.Context, bun bunLocator, codeDir, entry string) (*source, error) {
	if entry == "" {
		return nil, errors.New("packages: no entry file given")
	}
	path := filepath.Join(codeDir, entry)
	if ok, err := fileExists(path); err != nil || !ok {
		if err == nil {
			err = fs.ErrNotExist
		}
		return nil, fmt.Errorf("packages: entry file %s: %w", path, err)
	}
	switch {
	case strings.EqualFold(filepath.Ext(entry), ".py"):
		return inspectPip(codeDir)
	case manifest.IsJS(entry):
		return inspectBun(ctx, bun, codeDir, entry)
	}
	return nil, nil
}

// key hashes everything that determines an install's result.
func (i *Installer) key(ctx context.Context, codeDir string, s *source) (string, error) {
	h := sha256.New()
	field := func(parts ...string) {
		for _, p := range parts {
			// Length-prefixed, so that no two field lists hash alike.
			var n [8]byte
			binary.BigEndian.PutUint64(n[:], uint64(len(p)))
			h.Write(n[:])
			io.WriteString(h, p)
		}
	}
	switch s.kind {
	case Bun:
		tool, err := i.bunTool(ctx)
		if err != nil {
			return "", err
		}
		field("bun", bunLayout, tool.version, i.o.NpmRegistry)
	case Pip:
		tool, err := i.pipTool(ctx)
		if err != nil {
			return "", err
		}
		field("pip", pipLayout, tool.python, tool.pipVersion, i.o.PipIndexURL)
		field(i.o.PipFindLinks...)
	}
	if s.declared || s.kind == Pip {
		for _, name := range sortedKeys(s.files) {
			field(name, string(s.files[name]))
		}
	} else {
		field(s.pkgs...) // the generated package.json follows from the names
	}
	for _, rel := range s.locals {
		sum, err := hashLocal(codeDir, rel)
		if err != nil {
			return "", fmt.Errorf("packages: %w", err)
		}
		field("local", rel, sum)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func sortedKeys(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
