package packages

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/agenthost/host/internal/manifest"
)

// npmName is a valid npm package name, legacy upper case included.
var npmName = regexp.MustCompile(`^(?:@[A-Za-z0-9\-~][A-Za-z0-9\-._~]*/)?[A-Za-z0-9\-~][A-Za-z0-9\-._~]*$`)

// maxNameLen is npm's limit on a package name.
const maxNameLen = 214

// packageName maps an import specifier to the npm package that provides it:
// "@scope/name/sub" -> "@scope/name", "name/sub" -> "name". It reports false
// for what needs no install: a module the runtime provides (builtin, asked
// from Bun itself; with or without "node:"), any specifier with a scheme
// (node:, bun:, https:, file:, data:, npm:, ...), relative and absolute
// paths, package-internal "#imports", and text that is not a valid package
// name. The name goes on a generated package.json that bun install reads
// outside the jail, so only what npm would accept as a name gets through.
func packageName(spec string, builtin map[string]bool) (string, bool) {
	if spec == "" || strings.ContainsAny(spec, ":\\ \t\n") {
		return "", false
	}
	switch spec[0] {
	case '.', '/', '#':
		return "", false
	}
	parts := strings.Split(spec, "/")
	name := parts[0]
	if strings.HasPrefix(spec, "@") {
		if len(parts) < 2 || parts[1] == "" {
			return "", false
		}
		name = parts[0] + "/" + parts[1]
	}
	if builtin[spec] || builtin[name] || !npmName.MatchString(name) || len(name) > maxNameLen {
		return "", false
	}
	return name, true
}

// maxScanFiles and maxScanBytes bound the import scan of one function.
const (
	maxScanFiles = 2000
	maxScanBytes = 8 << 20
)

// bareImports returns the npm packages that entry, and every local module it
// reaches through relative imports inside codeDir, import; sorted and
// without duplicates. Bun's transpiler reads the files (see scanner); one bun
// process serves the whole walk, so a function load costs one Bun start.
func bareImports(ctx context.Context, bun, codeDir, entry string) ([]string, error) {
	root, err := filepath.Abs(codeDir)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, scanTimeout)
	defer cancel()
	sc, err := startScanner(ctx, bun)
	if err != nil {
		return nil, err
	}
	defer sc.close()
	seen := map[string]bool{}
	pkgs := map[string]bool{}
	queue := []string{filepath.Join(root, entry)}
	for len(queue) > 0 {
		file := queue[0]
		queue = queue[1:]
		if seen[file] {
			continue
		}
		seen[file] = true
		if len(seen) > maxScanFiles {
			return nil, fmt.Errorf("scan imports of %s: more than %d local modules", entry, maxScanFiles)
		}
		info, err := os.Stat(file)
		if err != nil {
			if file == filepath.Join(root, entry) {
				return nil, fmt.Errorf("scan imports: %w", err)
			}
			continue
		}
		if info.Size() > maxScanBytes {
			continue // a bundle, not a source file: its imports are inlined
		}
		src, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("scan imports: %w", err)
		}
		rel, _ := filepath.Rel(root, file)
		specs, err := sc.scan(rel, loaderFor(file), src)
		if err != nil {
			return nil, err
		}
		for _, spec := range specs {
			if strings.HasPrefix(spec, "./") || strings.HasPrefix(spec, "../") || spec == "." || spec == ".." {
				if next, ok := resolveLocal(root, filepath.Dir(file), spec); ok {
					queue = append(queue, next)
				}
				continue
			}
			if name, ok := packageName(spec, sc.builtins); ok {
				pkgs[name] = true
			}
		}
	}
	out := make([]string, 0, len(pkgs))
	for p := range pkgs {
		out = append(out, p)
	}
	slices.Sort(out)
	return out, nil
}

// resolveLocal finds the JS/TS file a relative import names, as Bun would
// (exact file, added extension, TypeScript's ".js" for ".ts", index file),
// and only inside root.
func resolveLocal(root, dir, spec string) (string, bool) {
	base := filepath.Join(dir, filepath.FromSlash(spec))
	if rel, err := filepath.Rel(root, base); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", false
	}
	var cands []string
	if manifest.IsJS(base) {
		cands = append(cands, base)
		stem := strings.TrimSuffix(base, filepath.Ext(base))
		switch strings.ToLower(filepath.Ext(base)) {
		case ".js", ".jsx":
			cands = append(cands, stem+".ts", stem+".tsx")
		case ".mjs":
			cands = append(cands, stem+".mts")
		case ".cjs":
			cands = append(cands, stem+".cts")
		}
	}
	for _, ext := range manifest.JSExts {
		cands = append(cands, base+ext)
	}
	for _, ext := range manifest.JSExts {
		cands = append(cands, filepath.Join(base, "index"+ext))
	}
	for _, c := range cands {
		if info, err := os.Stat(c); err == nil && info.Mode().IsRegular() {
			return c, true
		}
	}
	return "", false
}

// fileExists reports whether path is a regular file.
func fileExists(path string) (bool, error) {
	info, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return info.Mode().IsRegular(), nil
}
