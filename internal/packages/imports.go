package packages

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// builtins are the module names Bun provides without an install: Node's
// built-in modules (importable with or without "node:") as Bun lists them in
// require("module").builtinModules, plus "bun" itself. Bun also lists "ws"
// and "undici", which it implements natively: installing them would only
// shadow its own.
var builtins = map[string]bool{}

func init() {
	for _, m := range []string{
		"_http_agent", "_http_client", "_http_common", "_http_incoming", "_http_outgoing", "_http_server",
		"_stream_duplex", "_stream_passthrough", "_stream_readable", "_stream_transform", "_stream_wrap",
		"_stream_writable", "_tls_common", "_tls_wrap",
		"assert", "async_hooks", "buffer", "bun", "child_process", "cluster", "console", "constants",
		"crypto", "dgram", "diagnostics_channel", "dns", "domain", "events", "fs", "http", "http2", "https",
		"inspector", "module", "net", "os", "path", "perf_hooks", "process", "punycode", "querystring",
		"readline", "repl", "stream", "string_decoder", "sys", "timers", "tls", "trace_events", "tty",
		"undici", "url", "util", "v8", "vm", "wasi", "worker_threads", "ws", "zlib",
	} {
		builtins[m] = true
	}
}

// jsExts are the files whose imports are followed. Bun runs all of them.
var jsExts = []string{".ts", ".tsx", ".mts", ".cts", ".js", ".jsx", ".mjs", ".cjs"}

func isJS(path string) bool { return slices.Contains(jsExts, strings.ToLower(filepath.Ext(path))) }

// npmName is a valid npm package name, legacy upper case included.
var npmName = regexp.MustCompile(`^(?:@[A-Za-z0-9\-~][A-Za-z0-9\-._~]*/)?[A-Za-z0-9\-~][A-Za-z0-9\-._~]*$`)

// PackageName maps an import specifier to the npm package that provides it:
// "@scope/name/sub" -> "@scope/name", "name/sub" -> "name". It reports false
// for what needs no install: Node and Bun built-ins (with or without
// "node:"), any specifier with a scheme (node:, bun:, https:, file:, data:,
// npm:, ...), relative and absolute paths, package-internal "#imports", and
// text that is not a valid package name.
func PackageName(spec string) (string, bool) {
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
	if builtins[name] || !npmName.MatchString(name) || len(name) > 214 {
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
// without duplicates.
func bareImports(codeDir, entry string) ([]string, error) {
	root, err := filepath.Abs(codeDir)
	if err != nil {
		return nil, err
	}
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
		for _, spec := range extractImports(string(src)) {
			if strings.HasPrefix(spec, "./") || strings.HasPrefix(spec, "../") || spec == "." || spec == ".." {
				if next, ok := resolveLocal(root, filepath.Dir(file), spec); ok {
					queue = append(queue, next)
				}
				continue
			}
			if name, ok := PackageName(spec); ok {
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
	if isJS(base) {
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
	for _, ext := range jsExts {
		cands = append(cands, base+ext)
	}
	for _, ext := range jsExts {
		cands = append(cands, filepath.Join(base, "index"+ext))
	}
	for _, c := range cands {
		if info, err := os.Stat(c); err == nil && info.Mode().IsRegular() {
			return c, true
		}
	}
	return "", false
}

// extractImports returns the module specifiers of src's static imports
// (`import x from "m"`, `import "m"`, `import {a} from "m"`,
// `import * as n from "m"`), re-exports (`export {a} from "m"`,
// `export * from "m"`), dynamic imports with a literal (`import("m")`) and
// `require("m")` calls, in source order. Type-only imports and exports
// (`import type ...`, `export type ...`), which Bun erases, are skipped.
//
// It tokenises rather than matching lines so that comments, strings and
// template literals that merely contain import-like text are ignored. It is
// a heuristic, not a parser: it never fails, and text it cannot make sense of
// yields fewer imports.
func extractImports(src string) []string {
	toks := lex(src)
	var out []string
	at := func(i int) token {
		if i >= 0 && i < len(toks) {
			return toks[i]
		}
		return token{}
	}
	for i, t := range toks {
		if t.kind != tIdent {
			continue
		}
		if at(i-1).is(tPunct, ".") {
			// x.import / x.require: a member, except module.require and
			// import.meta.require, which are CommonJS's require.
			if !(t.val == "require" && (at(i-2).is(tIdent, "module") || at(i-2).is(tIdent, "meta"))) {
				continue
			}
		}
		switch t.val {
		case "import":
			n := at(i + 1)
			switch {
			case n.kind == tString: // import "m"
				out = append(out, n.val)
			case n.is(tPunct, "("): // import("m") or import("m", {with: ...})
				if s := at(i + 2); s.kind == tString && (at(i+3).is(tPunct, ")") || at(i+3).is(tPunct, ",")) {
					out = append(out, s.val)
				}
			case n.is(tIdent, "type") && !(at(i+2).is(tIdent, "from") || at(i+2).is(tPunct, ",")):
				// import type {...} from "m": erased. (`import type from "m"`
				// imports a default binding named type.)
			default:
				if s, ok := fromClause(toks, i+1); ok {
					out = append(out, s)
				}
			}
		case "export":
			n := at(i + 1)
			if n.is(tPunct, "{") || n.is(tPunct, "*") {
				if s, ok := fromClause(toks, i+1); ok {
					out = append(out, s)
				}
			}
		case "require":
			if at(i+1).is(tPunct, "(") && at(i+2).kind == tString && at(i+3).is(tPunct, ")") {
				out = append(out, at(i+2).val)
			}
		}
	}
	return out
}

// fromClause parses the bindings of an import or export starting at toks[i]
// up to `from "m"` and returns "m".
func fromClause(toks []token, i int) (string, bool) {
	for steps := 0; i < len(toks) && steps < 64; steps++ {
		t := toks[i]
		switch {
		case t.is(tIdent, "from"):
			if i+1 < len(toks) && toks[i+1].kind == tString {
				return toks[i+1].val, true
			}
			if i+1 < len(toks) && toks[i+1].is(tPunct, ",") {
				i++ // a default binding named from: import from, {x} from "m"
				continue
			}
			return "", false
		case t.kind == tIdent, t.is(tPunct, ","), t.is(tPunct, "*"):
			i++
		case t.is(tPunct, "{"):
			// Named bindings: identifiers, strings ("a-b" as x), commas, as.
			for i++; i < len(toks) && !toks[i].is(tPunct, "}"); i++ {
				if k := toks[i].kind; k != tIdent && k != tString && !toks[i].is(tPunct, ",") {
					return "", false
				}
			}
			i++
		default:
			return "", false
		}
	}
	return "", false
}

type tokKind int

const (
	tNone   tokKind = iota
	tIdent          // identifier or keyword
	tString         // string literal, or template literal without substitutions; val is its content
	tPunct          // one punctuation character
	tOther          // number, regular expression, template with substitutions
)

type token struct {
	kind tokKind
	val  string
}

func (t token) is(k tokKind, v string) bool { return t.kind == k && t.val == v }

// regexAfter are the keywords after which a slash starts a regular
// expression rather than a division.
var regexAfter = map[string]bool{
	"return": true, "typeof": true, "instanceof": true, "in": true, "of": true, "new": true,
	"delete": true, "void": true, "throw": true, "case": true, "do": true, "else": true,
	"yield": true, "await": true,
}

// lex splits JavaScript/TypeScript source into the tokens extractImports
// needs, dropping comments. String literals end at a line break, so that
// stray quotes (JSX text, a misread regular expression) cannot swallow the
// rest of the file.
func lex(src string) []token {
	var toks []token
	var tmplDepth []int // brace depth at each open `${`
	depth := 0
	i := 0
	if strings.HasPrefix(src, "#!") {
		i = lineEnd(src, 0)
	}
	prev := func() token {
		if len(toks) == 0 {
			return token{}
		}
		return toks[len(toks)-1]
	}
	for i < len(src) {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case c == '/' && i+1 < len(src) && src[i+1] == '/':
			i = lineEnd(src, i)
		case c == '/' && i+1 < len(src) && src[i+1] == '*':
			if end := strings.Index(src[i+2:], "*/"); end >= 0 {
				i += 2 + end + 2
			} else {
				i = len(src)
			}
		case c == '\'' || c == '"':
			val, next, ok := scanString(src, i)
			if ok {
				toks = append(toks, token{tString, val})
			}
			i = next
		case c == '`':
			val, next, subst := scanTemplate(src, i+1)
			if subst {
				tmplDepth = append(tmplDepth, depth)
				toks = append(toks, token{tOther, ""})
			} else {
				toks = append(toks, token{tString, val})
			}
			i = next
		case c == '}' && len(tmplDepth) > 0 && tmplDepth[len(tmplDepth)-1] == depth:
			// End of a `${...}`: the template literal goes on.
			tmplDepth = tmplDepth[:len(tmplDepth)-1]
			_, next, subst := scanTemplate(src, i+1)
			if subst {
				tmplDepth = append(tmplDepth, depth)
			}
			i = next
		case c == '/' && slashStartsRegex(prev()):
			if next, ok := scanRegex(src, i); ok {
				toks = append(toks, token{tOther, ""})
				i = next
			} else {
				toks = append(toks, token{tPunct, "/"})
				i++
			}
		case isIdentStart(c):
			j := i + 1
			for j < len(src) && isIdentPart(src[j]) {
				j++
			}
			toks = append(toks, token{tIdent, src[i:j]})
			i = j
		case c >= '0' && c <= '9':
			j := i + 1
			for j < len(src) && (isIdentPart(src[j]) || src[j] == '.') {
				j++
			}
			toks = append(toks, token{tOther, ""})
			i = j
		default:
			switch c {
			case '{':
				depth++
			case '}':
				depth--
			}
			toks = append(toks, token{tPunct, string(c)})
			i++
		}
	}
	return toks
}

func lineEnd(src string, i int) int {
	if n := strings.IndexByte(src[i:], '\n'); n >= 0 {
		return i + n + 1
	}
	return len(src)
}

func isIdentStart(c byte) bool {
	return c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

func isIdentPart(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }

func slashStartsRegex(p token) bool {
	switch p.kind {
	case tNone:
		return true
	case tIdent:
		return regexAfter[p.val]
	case tPunct:
		return p.val != ")" && p.val != "]"
	}
	return false // after a number, string or regex: division
}

// scanString reads the literal opening at src[i]. ok is false for a literal
// cut by a line break; next is then just after the break.
func scanString(src string, i int) (val string, next int, ok bool) {
	q := src[i]
	var sb strings.Builder
	for j := i + 1; j < len(src); j++ {
		switch c := src[j]; c {
		case q:
			return sb.String(), j + 1, true
		case '\n':
			return "", j + 1, false
		case '\\':
			if j+1 < len(src) {
				j++
				if src[j] == '\r' && j+1 < len(src) && src[j+1] == '\n' {
					j++
				}
				if src[j] != '\n' && src[j] != '\r' {
					// Escapes are kept as the escaped character; a
					// specifier with \u or \x escapes is no package name
					// anyway.
					sb.WriteByte(src[j])
				}
			}
		default:
			sb.WriteByte(c)
		}
	}
	return "", len(src), false
}

// scanTemplate reads template text from src[i] up to the closing backquote
// (subst false) or to a `${` (subst true); next is just after either.
func scanTemplate(src string, i int) (val string, next int, subst bool) {
	for j := i; j < len(src); j++ {
		switch src[j] {
		case '\\':
			j++
		case '`':
			return src[i:j], j + 1, false
		case '$':
			if j+1 < len(src) && src[j+1] == '{' {
				return "", j + 2, true
			}
		}
	}
	return "", len(src), false
}

// scanRegex reads a regular expression literal opening at src[i], on one
// line; ok is false when it does not close there.
func scanRegex(src string, i int) (next int, ok bool) {
	inClass := false
	for j := i + 1; j < len(src); j++ {
		switch src[j] {
		case '\\':
			j++
		case '\n':
			return 0, false
		case '[':
			inClass = true
		case ']':
			inClass = false
		case '/':
			if !inClass {
				j++
				for j < len(src) && isIdentPart(src[j]) {
					j++ // flags
				}
				return j, true
			}
		}
	}
	return 0, false
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
