package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/agenthost/host/internal/runtimes"
)

// npmAllowed is the end of every package.json refusal: what may be written instead.
const npmAllowed = `a dependency comes from the registry ("^1.2.3", "latest", "npm:name@1.2.3"), a URL, ` +
	`or a folder or tarball inside the function folder ("file:./vendor/name"), which is copied into the install`

// bunLockfiles are used with a declared package.json when present.
var bunLockfiles = []string{"bun.lock", "bun.lockb"}

// Bun reads and checks the function folder's package.json and lockfile. It returns
// package.json (nil when there is none), the lockfiles present, and the paths (relative to
// dir, cleaned) that the install needs copied from the folder: local dependencies and patch
// files, those of local dependencies' own package.json files included.
func Bun(dir string) (pj []byte, locks map[string][]byte, locals []string, err error) {
	pjPath := filepath.Join(dir, "package.json")
	pj, err = readManifest(pjPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil, nil
	}
	if err != nil {
		return nil, nil, nil, err
	}
	var refused refusals
	seen := map[string]bool{}
	// Local folder dependencies have package.json files of their own, whose dependencies bun
	// installs too, relative to that folder: each is checked like the function's own.
	type pending struct {
		base string // the folder of the package.json, relative to dir
		b    []byte
	}
	queue := []pending{{base: ".", b: pj}}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		file := filepath.Join(dir, p.base, "package.json")
		found, err := checkPackageJSON(dir, p.base, file, p.b, &refused)
		if err != nil {
			return nil, nil, nil, err
		}
		for _, rel := range found {
			if seen[rel] {
				continue
			}
			seen[rel] = true
			locals = append(locals, rel)
			sub := filepath.Join(dir, rel, "package.json")
			b, err := readManifest(sub)
			switch {
			case err == nil:
				queue = append(queue, pending{base: rel, b: b})
			case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR): // a tarball has none
				return nil, nil, nil, err
			}
		}
	}
	locks = map[string][]byte{}
	for _, name := range bunLockfiles {
		b, err := readManifest(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, nil, nil, err
		}
		locks[name] = b
		// bun.lockb is binary and cannot be read here; whatever it resolves to, the installer
		// runs as an unprivileged user on a copy of the folder's manifests (see run).
		if name == "bun.lock" {
			if err := checkBunLock(dir, filepath.Join(dir, name), b, &refused); err != nil {
				return nil, nil, nil, err
			}
		}
	}
	if err := refused.err(); err != nil {
		return nil, nil, nil, err
	}
	slices.Sort(locals)
	return pj, locks, locals, nil
}

// depSections are the package.json objects whose values are dependency specs.
var depSections = []string{"dependencies", "devDependencies", "optionalDependencies", "peerDependencies"}

// checkPackageJSON checks one package.json, whose folder is base (relative to dir), and
// returns the local paths its dependencies and patches name.
func checkPackageJSON(dir, base, file string, b []byte, refused *refusals) ([]string, error) {
	var locals []string
	spec := func(what, s string, line int) {
		if rel, ok := checkNpmSpec(dir, base, s, func(why string) {
			refused.add(file, line, fmt.Sprintf("%s %q", what, s), why+"; "+npmAllowed)
		}); ok {
			locals = append(locals, rel)
		}
	}
	err := walkJSON(b, func(path []string, s string, line int) {
		if len(path) < 2 {
			return
		}
		sec := path[0]
		switch {
		case slices.Contains(depSections, sec) && len(path) == 2:
			spec(fmt.Sprintf("%s %q:", sec, path[1]), s, line)
		case sec == "overrides" || sec == "resolutions" || sec == "catalog" || sec == "catalogs":
			// Nested: "overrides": {"a": {"b": "file:..."}}, "catalogs": {"group": {...}}.
			spec(fmt.Sprintf("%s %q:", sec, strings.Join(path[1:], " > ")), s, line)
		case sec == "patchedDependencies" && len(path) == 2:
			// bun reads the patch file and applies it to the package.
			what := fmt.Sprintf("%s %q: %q", sec, path[1], s)
			if rel, why := insideFolder(dir, base, s, true); why != "" {
				refused.add(file, line, what, why+"; a patch file must be inside the function folder (\"patches/name.patch\")")
			} else {
				locals = append(locals, rel)
			}
		case sec == "workspaces":
			// ["packages/*"], or {"packages": [...], "catalog": {...}, "catalogs": {...}}.
			switch {
			case len(path) == 2 || len(path) == 3 && path[1] == "packages":
				if why := globInside(s); why != "" {
					refused.add(file, line, fmt.Sprintf("workspaces %q", s), why+"; workspaces must be folders inside the function folder (\"packages/*\")")
				}
			case path[1] == "catalog" || path[1] == "catalogs":
				spec(fmt.Sprintf("workspaces %s %q:", path[1], strings.Join(path[2:], " > ")), s, line)
			}
		}
	})
	if err != nil {
		return nil, &runtimes.DefinitionError{Message: fmt.Sprintf("%s is not valid JSON: %v; fix it, then run `host check` again", file, err)}
	}
	return locals, nil
}

// checkBunLock checks the text lockfile: a resolution in it is what bun installs, whatever
// package.json says, so a hand-written bun.lock could point at host paths too.
func checkBunLock(dir, file string, b []byte, refused *refusals) error {
	err := walkJSON(jsoncToJSON(b), func(path []string, s string, line int) {
		switch {
		case len(path) >= 2 && path[0] == "workspaces":
			// "workspaces": {"": {...}, "packages/a": {"dependencies": {...}}}
			ws := path[1]
			if ws != "" {
				// Listed workspaces need not exist (yet): only where they would be is checked.
				if _, why := insideFolder(dir, ".", ws, false); why != "" {
					refused.add(file, line, fmt.Sprintf("workspace %q", ws), why+"; workspaces must be folders inside the function folder")
					return
				}
			}
			if len(path) == 4 && slices.Contains(depSections, path[2]) {
				base := ws
				if base == "" {
					base = "."
				}
				checkNpmSpec(dir, base, s, func(why string) {
					refused.add(file, line, fmt.Sprintf("%s %q: %q", path[2], path[3], s), why+"; "+npmAllowed)
				})
			}
		case len(path) == 3 && path[0] == "packages" && path[2] == "0":
			// "packages": {"name": ["name@resolution", ...]}
			_, res := splitNameAt(s)
			if why := lockResolution(dir, res); why != "" {
				refused.add(file, line, fmt.Sprintf("package %q: %q", path[1], s), why+"; "+npmAllowed+" (run bun install again after fixing package.json)")
			}
		case len(path) >= 2 && (path[0] == "overrides" || path[0] == "catalog" || path[0] == "catalogs"):
			checkNpmSpec(dir, ".", s, func(why string) {
				refused.add(file, line, fmt.Sprintf("%s %q: %q", path[0], strings.Join(path[1:], " > "), s), why+"; "+npmAllowed)
			})
		case len(path) == 2 && path[0] == "patchedDependencies":
			if _, why := insideFolder(dir, ".", s, false); why != "" {
				refused.add(file, line, fmt.Sprintf("patchedDependencies %q: %q", path[1], s), why+"; a patch file must be inside the function folder")
			}
		}
	})
	if err != nil {
		return &runtimes.DefinitionError{Message: fmt.Sprintf("%s cannot be read: %v; run bun install in the function folder again, or remove it", file, err)}
	}
	return nil
}

// lockResolution checks a bun.lock resolution ("7.0.0", "file:vendor/pkg", "link:./x",
// "workspace:packages/a", "git+file:///x", a URL); "" means allowed.
func lockResolution(dir, res string) string {
	scheme, rest, ok := strings.Cut(res, ":")
	if !ok {
		return ""
	}
	switch scheme = strings.ToLower(scheme); {
	case scheme == "link", scheme == "portal":
		return linkWhy
	case scheme == "file", scheme == "workspace":
		_, why := insideFolder(dir, ".", rest, false)
		return why
	case fileTransport(scheme):
		return gitFileWhy
	}
	return ""
}

// splitNameAt splits "name@spec" (or "@scope/name@spec") at the @ that ends the name: a
// name holds no other @, while a path in the spec may.
func splitNameAt(s string) (name, spec string) {
	from := 0
	if strings.HasPrefix(s, "@") {
		from = 1
	}
	at := strings.IndexByte(s[from:], '@')
	if at < 0 {
		return s, ""
	}
	return s[:from+at], s[from+at+1:]
}

const (
	linkWhy = "a link: or portal: dependency is a symbolic link from the install to a folder, " +
		"which reaches outside the install (and does not exist in the jail)"
	gitFileWhy = "a git+file: dependency is a git repository on the host's disk"
)

// checkNpmSpec checks one dependency spec of the package.json in base (relative to dir). A
// spec naming a local path inside the folder returns that path (relative to dir) and true; a
// registry version, tag, alias or URL returns false; anything else is refused through refuse.
func checkNpmSpec(dir, base, spec string, refuse func(why string)) (string, bool) {
	s := strings.TrimSpace(spec)
	scheme := ""
	if m := urlScheme.FindStringSubmatch(s); m != nil {
		scheme = strings.ToLower(m[1])
	}
	var path string
	switch {
	case scheme == "npm":
		// "npm:name@range", "npm:@scope/name@range": an alias, whose range is checked.
		if _, rng := splitNameAt(s[len("npm:"):]); rng != "" {
			return checkNpmSpec(dir, base, rng, refuse)
		}
		return "", false
	case scheme == "link", scheme == "portal":
		refuse(linkWhy)
		return "", false
	case fileTransport(scheme):
		refuse(gitFileWhy)
		return "", false
	case scheme == "file":
		path = s[len("file:"):]
	case scheme == "workspace":
		// "workspace:*", "workspace:^1.0": a version of a workspace package; a path is a path.
		rest := s[len("workspace:"):]
		if !looksLikePath(rest) {
			return "", false
		}
		path = rest
	case scheme == "" && looksLikePath(s):
		// npm and bun read "./vendor/x", "../x" and "/x" as file: specs.
		path = s
	default:
		return "", false // a version, range, tag, "user/repo", or a URL over the network
	}
	rel, why := insideFolder(dir, base, path, true)
	if why != "" {
		refuse(why)
		return "", false
	}
	return rel, true
}

// walkJSON calls visit for every string value of the document, with the keys and array
// indexes leading to it and its line.
func walkJSON(b []byte, visit func(path []string, s string, line int)) error {
	var starts []int // offsets where lines begin
	starts = append(starts, 0)
	for i, c := range b {
		if c == '\n' {
			starts = append(starts, i+1)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	lineAt := func() int {
		off := int(dec.InputOffset())
		return sort.Search(len(starts), func(i int) bool { return starts[i] > off-1 })
	}
	var value func(path []string) error
	value = func(path []string) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch t := tok.(type) {
		case string:
			visit(path, t, lineAt())
		case json.Delim:
			switch t {
			case '{':
				for dec.More() {
					k, err := dec.Token()
					if err != nil {
						return err
					}
					key, _ := k.(string)
					if err := value(append(slices.Clip(path), key)); err != nil {
						return err
					}
				}
			case '[':
				for n := 0; dec.More(); n++ {
					if err := value(append(slices.Clip(path), strconv.Itoa(n))); err != nil {
						return err
					}
				}
			}
			if _, err := dec.Token(); err != nil { // the closing delimiter
				return err
			}
		}
		return nil
	}
	if err := value(nil); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("unexpected data after the top-level value")
	}
	return nil
}

// jsoncToJSON blanks out what bun.lock has beyond JSON (comments, trailing commas) with
// spaces, so that offsets and lines stay those of the file.
func jsoncToJSON(b []byte) []byte {
	out := slices.Clone(b)
	inStr := false
	for i := 0; i < len(out); i++ {
		c := out[i]
		switch {
		case inStr:
			if c == '\\' {
				i++
			} else if c == '"' {
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == '/' && i+1 < len(out) && out[i+1] == '/':
			for ; i < len(out) && out[i] != '\n'; i++ {
				out[i] = ' '
			}
		case c == '/' && i+1 < len(out) && out[i+1] == '*':
			for ; i < len(out) && !(out[i] == '*' && i+1 < len(out) && out[i+1] == '/'); i++ {
				if out[i] != '\n' {
					out[i] = ' '
				}
			}
			if i+1 < len(out) {
				out[i], out[i+1] = ' ', ' '
				i++
			}
		case c == ',':
			j := i + 1
			for j < len(out) && (out[j] == ' ' || out[j] == '\t' || out[j] == '\n' || out[j] == '\r') {
				j++
			}
			if j < len(out) && (out[j] == '}' || out[j] == ']') {
				out[i] = ' '
			}
		}
	}
	return out
}
