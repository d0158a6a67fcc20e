package manifest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

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

// Pip reads and checks the function folder's requirements.txt. It returns the file
// (nil when there is none) and the local wheels it names (relative to dir).
func Pip(dir string) ([]byte, []string, error) {
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

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
