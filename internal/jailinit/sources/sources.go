// Package sources names what the embedded jail init (package initbin) is
// built from, so that a test can tell when the committed binaries are stale
// without rebuilding them: a rebuild differs byte for byte across Go patch
// releases, while the sources and the one dependency's version do not.
package sources

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Dirs are the init's package directories, relative to the module root.
// Tests are not part of the binary and are left out.
var Dirs = []string{"internal/jailinit", "internal/jailinit/cmd/jailinit"}

// Module is the init's only dependency outside the standard library.
const Module = "golang.org/x/sys"

// Manifest lists the sha256 of each of the init's source files under the
// module root, one "sum  path" line each in path order, and the version of
// Module that go.mod requires.
func Manifest(root string) (string, error) {
	var b strings.Builder
	for _, dir := range Dirs {
		entries, err := os.ReadDir(filepath.Join(root, dir))
		if err != nil {
			return "", fmt.Errorf("list the jail init's sources: %w", err)
		}
		names := make([]string, 0, len(entries))
		for _, e := range entries {
			n := e.Name()
			if e.Type().IsRegular() && strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
				names = append(names, n)
			}
		}
		slices.Sort(names)
		for _, n := range names {
			data, err := os.ReadFile(filepath.Join(root, dir, n))
			if err != nil {
				return "", fmt.Errorf("read the jail init's sources: %w", err)
			}
			sum := sha256.Sum256(data)
			fmt.Fprintf(&b, "%s  %s/%s\n", hex.EncodeToString(sum[:]), dir, n)
		}
	}
	v, err := requiredVersion(filepath.Join(root, "go.mod"), Module)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "%s %s\n", Module, v)
	return b.String(), nil
}

// requiredVersion reads the version of module from a go.mod's require
// lines, in either the block or the one-line form.
func requiredVersion(gomod, module string) (string, error) {
	f, err := os.Open(gomod)
	if err != nil {
		return "", fmt.Errorf("read the jail init's dependency versions: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "require "))
		if len(fields) >= 2 && fields[0] == module {
			return fields[1], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read %s: %w", gomod, err)
	}
	return "", fmt.Errorf("%s does not require %s, which the jail init needs", gomod, module)
}
