package packages

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/agenthost/host/internal/runtimes"
)

// The manifests a function's author writes decide what the installer reads: a package.json
// dependency "file:/root/secrets" or a requirements.txt line "-r /etc/shadow" would have it
// read host files, and hand them to the jail (copied into the install) or to every caller (in
// the error event). So the only sources a manifest may name are package indexes and paths
// inside the function's own folder; everything else is refused when the function is loaded,
// with the file and line, before any installer runs. Install time checks again, on the
// snapshot, in case the folder changed in between.

// CheckManifests refuses a function folder whose package manifests name a dependency source
// outside it: package.json (and bun.lock) for a TS/JS entry, requirements.txt for a Python
// one. The error is a *runtimes.DefinitionError (no retry can fix it) naming each refused
// line as file:line, the dependency and what is allowed instead. A folder without manifests,
// or an entry of another runtime, passes.
func CheckManifests(dir, entry string) error {
	switch {
	case strings.EqualFold(filepath.Ext(entry), ".py"):
		_, _, err := pipManifest(dir)
		return err
	case isJS(entry):
		_, _, _, err := bunManifests(dir)
		return err
	}
	return nil
}

// refusals collects the refused lines of a folder's manifests.
type refusals []string

func (r *refusals) add(file string, line int, what, why string) {
	*r = append(*r, fmt.Sprintf("%s:%d: %s: %s", file, line, what, why))
}

// err reports every refused line, so that one `host check` shows all there is to fix.
func (r refusals) err() error {
	if len(r) == 0 {
		return nil
	}
	return &runtimes.DefinitionError{Message: strings.Join(r, "\n  ")}
}

// maxManifest bounds a manifest read into memory (bun.lock files of large trees run to MBs).
const maxManifest = 16 << 20

// readManifest reads a manifest of the function folder, which must be a regular file there:
// the host reads it with its own rights, so a link (requirements.txt -> /etc/shadow) would
// have it read, and quote in errors, any host file; and a fifo would hang the load. A missing
// file is an error wrapping fs.ErrNotExist.
func readManifest(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, &runtimes.DefinitionError{Message: fmt.Sprintf("%s is a symbolic link: the host reads manifests with its own rights, so it must be a file in the function folder; replace the link with the file itself", path)}
	}
	if err != nil {
		return nil, fmt.Errorf("packages: read %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("packages: read %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, &runtimes.DefinitionError{Message: fmt.Sprintf("%s is not a regular file (%v): replace it with the file itself", path, st.Mode().Type())}
	}
	b, err := io.ReadAll(io.LimitReader(f, maxManifest+1))
	if err != nil {
		return nil, fmt.Errorf("packages: read %s: %w", path, err)
	}
	if len(b) > maxManifest {
		return nil, &runtimes.DefinitionError{Message: fmt.Sprintf("%s is larger than %d MiB: a manifest that size is not one the host reads", path, maxManifest>>20)}
	}
	return b, nil
}

// --- package.json and bun.lock ---

// npmAllowed is the end of every package.json refusal: what may be written instead.
const npmAllowed = `a dependency comes from the registry ("^1.2.3", "latest", "npm:name@1.2.3"), a URL, ` +
	`or a folder or tarball inside the function folder ("file:./vendor/name"), which is copied into the install`

// bunManifests reads and checks the function folder's package.json and lockfile. It returns
// package.json (nil when there is none), the lockfiles present, and the paths (relative to
// dir, cleaned) that the install needs copied from the folder: local dependencies and patch
// files, those of local dependencies' own package.json files included.
func bunManifests(dir string) (pj []byte, locks map[string][]byte, locals []string, err error) {
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

// fileTransport reports a URL scheme that fetches over file: ("git+file").
func fileTransport(scheme string) bool {
	return strings.HasSuffix(scheme, "+file") || strings.HasPrefix(scheme, "file+")
}

// looksLikePath is how npm tells a path from a version or a GitHub "user/repo".
func looksLikePath(s string) bool {
	return s == "." || s == ".." || s == "~" || strings.HasPrefix(s, "./") || strings.HasPrefix(s, "../") ||
		strings.HasPrefix(s, "/") || strings.HasPrefix(s, "~/")
}

// insideFolder resolves p, relative to the folder base inside dir, and returns it relative to
// dir; why is non-empty when p is absolute, in a home directory, climbs out of dir, is dir
// itself, does not exist (when mustExist), or is (or passes through) a symbolic link leading
// out of dir. A local folder's own links are checked too: the installer copies the folder.
func insideFolder(dir, base, p string, mustExist bool) (rel, why string) {
	switch {
	case strings.HasPrefix(p, "//"):
		return "", fmt.Sprintf("file:%s is a file URL naming a path on the host", p)
	case strings.HasPrefix(p, "~"):
		return "", fmt.Sprintf("%s is in a home directory on the host, outside the function folder", p)
	case filepath.IsAbs(p):
		return "", fmt.Sprintf("%s is an absolute path on the host, outside the function folder", p)
	}
	rel = filepath.Clean(filepath.Join(base, p))
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Sprintf("%s climbs out of the function folder", p)
	}
	if rel == "." {
		return "", fmt.Sprintf("%s is the function folder itself", p)
	}
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Sprintf("the function folder cannot be resolved (%v)", err)
	}
	full := filepath.Join(root, rel)
	real, err := filepath.EvalSymlinks(full)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if !mustExist {
				return rel, ""
			}
			return "", fmt.Sprintf("%s does not exist in the function folder", p)
		}
		return "", fmt.Sprintf("%s cannot be resolved (%v)", p, err)
	}
	if !within(root, real) {
		return "", fmt.Sprintf("%s is a symbolic link leading out of the function folder", p)
	}
	if why := linksStayInside(root, real, p); why != "" {
		return "", why
	}
	return rel, ""
}

// linksStayInside walks a local folder and refuses a symbolic link in it that leads out of
// root: copied into the install, it would make the installer read what it points to.
func linksStayInside(root, top, name string) string {
	var why string
	filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
		if err != nil || why != "" {
			return filepath.SkipAll
		}
		if d.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		if real, err := filepath.EvalSymlinks(p); err == nil && !within(root, real) {
			rel, _ := filepath.Rel(root, p)
			why = fmt.Sprintf("%s holds %s, a symbolic link leading out of the function folder", name, rel)
			return filepath.SkipAll
		}
		return nil
	})
	return why
}

// within reports whether the resolved path p is root or beneath it.
func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// globInside refuses a workspace glob that leaves the folder; its matches are not resolved.
func globInside(g string) string {
	switch {
	case strings.HasPrefix(g, "~"):
		return g + " is in a home directory on the host"
	case filepath.IsAbs(g):
		return g + " is an absolute path on the host"
	}
	for _, seg := range strings.Split(filepath.ToSlash(g), "/") {
		if seg == ".." {
			return g + " climbs out of the function folder"
		}
	}
	return ""
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

// --- requirements.txt ---

// pipAllowed is the end of most requirements.txt refusals.
const pipAllowed = "a requirement names a project on the index (name==1.2.3, name[extra]>=1; markers allowed), " +
	"a URL (name @ https://...), or a wheel inside the function folder (./wheels/name-1.2.3-py3-none-any.whl)"

// pipOptions are the options a requirements.txt may hold: none of them reads a file or
// changes where packages come from.
var pipOptions = []string{"--pre", "--prefer-binary", "--require-hashes", "--hash", "--trusted-host", "--use-feature", "--no-index"}

// pipOptionWhy says why an option is refused, and what to do instead.
func pipOptionWhy(opt string) string {
	switch opt {
	case "-r", "--requirement":
		return "it reads another requirements file, which may be any file on the host; list the requirements in this requirements.txt itself"
	case "-c", "--constraint":
		return "it reads a constraints file, which may be any file on the host; pin the versions in this requirements.txt itself (name==1.2.3)"
	case "-e", "--editable":
		return "an editable install builds a source tree, which runs its code outside the jail and may be anywhere on the host; list a released version (name==1.2.3) or a wheel inside the function folder (./wheels/name-1.2.3-py3-none-any.whl)"
	case "-f", "--find-links", "-i", "--index-url", "--extra-index-url":
		return "where packages come from is the host operator's choice (host serve --pip-index-url, --pip-find-links); remove the line, or ask the operator for the index you need"
	case "--no-binary", "--only-binary":
		return "installs are wheels only (--only-binary=:all:), so that no package's build code runs outside the jail; remove the line"
	}
	return fmt.Sprintf("the host accepts only %s in a requirements.txt; remove it (a long option must be written out in full)", strings.Join(pipOptions, ", "))
}

// pipManifest reads and checks the function folder's requirements.txt. It returns the file
// (nil when there is none) and the local wheels it names (relative to dir).
func pipManifest(dir string) ([]byte, []string, error) {
	file := filepath.Join(dir, "requirements.txt")
	b, err := readManifest(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var refused refusals
	locals := checkRequirements(dir, file, b, &refused)
	if err := refused.err(); err != nil {
		return nil, nil, err
	}
	return b, locals, nil
}

var (
	// pipComment is pip's COMMENT_RE.
	pipComment = regexp.MustCompile(`(^|\s+)#.*$`)
	// pipEnvVar is what pip expands in a requirements file (${NAME}).
	pipEnvVar = regexp.MustCompile(`\$\{[A-Z0-9_]+\}`)
	// pipDirectRef is "name[extras] @ url" (PEP 508).
	pipDirectRef = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*\s*(\[[^\]]*\])?\s*@\s*(\S+)`)
	// urlScheme is a URL's scheme ("https", "git+https", "file").
	urlScheme = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*):`)
)

// pipArchives are what pip installs from as a file (and takes a bare name with them for a path).
var pipArchives = []string{".whl", ".zip", ".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tar.xz", ".txz", ".tar", ".tar.lz"}

// checkRequirements checks a requirements.txt line by line, as pip reads it: lines ending in
// a backslash are joined, comments dropped, and options split from the requirement at the
// first word starting with "-".
func checkRequirements(dir, file string, b []byte, refused *refusals) []string {
	var locals []string
	for _, l := range pipLines(b) {
		line := strings.TrimSpace(pipComment.ReplaceAllString(l.text, ""))
		if line == "" {
			continue
		}
		shown := truncate(line, 120)
		if pipEnvVar.MatchString(line) {
			refused.add(file, l.n, fmt.Sprintf("%q", shown), "pip would fill ${...} in from the host's environment; write the value itself")
			continue
		}
		// pip's break_args_options: words up to the first one starting with "-" are the requirement.
		words := strings.Split(line, " ")
		k := slices.IndexFunc(words, func(w string) bool { return strings.HasPrefix(w, "-") })
		req, opts := line, []string(nil)
		if k >= 0 {
			req, opts = strings.TrimSpace(strings.Join(words[:k], " ")), words[k:]
		}
		for _, w := range opts {
			if !strings.HasPrefix(w, "-") {
				continue // an option's value
			}
			name := w
			if strings.HasPrefix(w, "--") {
				name, _, _ = strings.Cut(w, "=")
			} else if len(w) > 2 {
				name = w[:2] // "-rfile": short options take their value attached
			}
			// On a requirement line pip takes only per-requirement options; of those --hash.
			if slices.Contains(pipOptions, name) && (req == "" || name == "--hash") {
				continue
			}
			refused.add(file, l.n, fmt.Sprintf("%q", shown), fmt.Sprintf("%s is not allowed: %s", name, pipOptionWhy(name)))
		}
		if req == "" {
			continue
		}
		if rel, why := checkRequirement(dir, req); why != "" {
			refused.add(file, l.n, fmt.Sprintf("%q", shown), why+"; "+pipAllowed)
		} else if rel != "" {
			locals = append(locals, rel)
		}
	}
	slices.Sort(locals)
	return slices.Compact(locals)
}

// checkRequirement checks the requirement part of a line. A wheel inside the folder returns
// its path relative to dir.
func checkRequirement(dir, req string) (rel, why string) {
	if m := pipDirectRef.FindStringSubmatch(req); m != nil {
		return "", checkPipURL(m[2], true)
	}
	// A path or URL may carry markers after "; ".
	target, _, _ := strings.Cut(req, "; ")
	target = strings.TrimSpace(target)
	if m := urlScheme.FindStringSubmatch(target); m != nil && len(m[1]) > 1 { // "c:" is no scheme
		return "", checkPipURL(target, false)
	}
	if !pipPath(target) {
		return "", "" // a project name with its version specifiers and markers
	}
	rel, why = insideFolder(dir, ".", target, true)
	if why != "" {
		return "", why
	}
	if st, err := os.Stat(filepath.Join(dir, rel)); err != nil || !st.Mode().IsRegular() || !strings.HasSuffix(strings.ToLower(rel), ".whl") {
		return "", fmt.Sprintf("%s is not a wheel file: a folder or a source archive would be built, which runs its code outside the jail", target)
	}
	return rel, ""
}

// checkPipURL refuses file: URLs (and VCS URLs on file:); network URLs are a source like the index.
func checkPipURL(u string, direct bool) string {
	m := urlScheme.FindStringSubmatch(u)
	if m == nil {
		if direct {
			return fmt.Sprintf("%s after @ is not a URL", u)
		}
		return ""
	}
	scheme := strings.ToLower(m[1])
	if scheme == "file" || fileTransport(scheme) {
		return fmt.Sprintf("%s is a file: URL, which names a path on the host", u)
	}
	return ""
}

// pipPath is pip's _looks_like_path, plus the archive names it takes for files.
func pipPath(s string) bool {
	if strings.ContainsAny(s, `/\`) || strings.HasPrefix(s, ".") || strings.HasPrefix(s, "~") {
		return true
	}
	low := strings.ToLower(s)
	return slices.ContainsFunc(pipArchives, func(ext string) bool { return strings.HasSuffix(low, ext) })
}

type pipLine struct {
	n    int // the line it starts on, from 1
	text string
}

// pipLines joins continued lines as pip's join_lines does: a line ending in a backslash
// continues on the next, unless it holds a comment.
func pipLines(b []byte) []pipLine {
	var out []pipLine
	var cont []string
	start := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if !strings.HasSuffix(line, `\`) || pipComment.MatchString(line) {
			if pipComment.MatchString(line) {
				line = " " + line
			}
			if cont != nil {
				out = append(out, pipLine{start, strings.Join(append(cont, line), "")})
				cont = nil
			} else {
				out = append(out, pipLine{n, line})
			}
			continue
		}
		if cont == nil {
			start = n
		}
		cont = append(cont, strings.Trim(line, `\`))
	}
	if cont != nil {
		out = append(out, pipLine{start, strings.Join(cont, "")})
	}
	return out
}
