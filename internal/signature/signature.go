// Package signature reads the types of main's parameters from a function's source when the
// function is loaded, and checks a payload against them before a job is started: a call
// with `"top": "two"` for `top: int` is refused with a message naming the argument, the
// expected and the given type, instead of running and returning nonsense.
//
// A parameter's type is read once, into a JSON Schema (typeSchema): the one an MCP client is
// shown (InputSchema), the one a payload is validated against (Check, with
// github.com/google/jsonschema-go) and the one a form's fields are built from (Param.Accepts),
// so that what a caller is told and what the host enforces cannot drift apart.
//
// Only what is certain is checked. Python annotations and TypeScript types that name str,
// int, float, bool, list, dict (TS: string, number, boolean, literals, arrays, object,
// Record, object literals, and a type alias the TypeScript source declares on one line), their
// elements and values, their unions with None/null/undefined, Optional[X] and Union[...] are
// read. A parameter with any other type (a class, a generic, an alias spread over lines), and a main the source does not show plainly (decorated, assigned, imported,
// overloaded, generic, destructured), is not checked at all: the shim in the jail still binds
// the arguments as it always has. Reading the header here, with a small scanner instead of
// the interpreters, keeps load cheap and runs nothing of the user's.
package signature

import (
	"cmp"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/agenthost/host/internal/runtimes"
)

// Kind is a set of JSON value kinds a parameter accepts.
type Kind uint8

const (
	String Kind = 1 << iota
	Int         // a JSON number without fraction or exponent
	Float       // any JSON number
	Bool
	List
	Object
	Null
)

// Param is one parameter of main whose type is checked.
type Param struct {
	Name    string
	Accepts Kind
	// Type is the type as the source writes it, for messages ("int", "list[str] | None").
	Type string
	// Default is the default value as the source writes it ("3", `"world"`), "" when none.
	Default string
	// Optional is true when a caller may leave it out: it has a default, or is marked `?`.
	Optional bool
	// Means is what Type stands for when it names a type alias the source declares on one
	// line (TypeScript: `type AgentInstructions = Record<string, string>`), read as that
	// type; "" otherwise.
	Means string

	schema Schema // what Type says, null included where it may be; {} when not read
}

// Signature lists the checked parameters of a function's main, in the source's order.
type Signature struct {
	Params []Param
	check  []*jsonschema.Resolved // per param: its schema, a secret reference accepted anywhere
}

// Read returns the checkable parameters of main in src, or nil when there are none (a bash
// script, no type hints, or a main this reader does not see plainly).
func Read(kind runtimes.Kind, src []byte) *Signature {
	var sig Signature
	for _, p := range Fields(kind, src) {
		if p.Accepts == 0 {
			continue
		}
		r, err := resolve(lenient(p.schema))
		if err != nil {
			continue // a schema the validator cannot take is not checked
		}
		sig.Params = append(sig.Params, p)
		sig.check = append(sig.check, r)
	}
	if len(sig.Params) == 0 {
		return nil
	}
	return &sig
}

// Fields lists every named parameter of main in src, in order, for a form to ask for: those
// Read checks, and those whose type it does not read (Accepts 0: any JSON value). It is nil
// when main is not plain to see, as for Read.
func Fields(kind runtimes.Kind, src []byte) []Param {
	switch kind {
	case runtimes.Python:
		return readPython(string(src))
	case runtimes.Bun:
		return readTS(string(src))
	}
	return nil
}

// Check validates a payload (a JSON object, as the runner decoded it) against the schema of
// each checked parameter and returns a *runtimes.ArgumentError naming every mismatched
// argument: a failure no retry can fix. Missing and unknown keys are the shim's business, and a
// "$secret:<name>" reference, at any depth, is resolved to whatever the secret holds only
// later, so neither is judged here.
func (s *Signature) Check(payload []byte) error {
	if s == nil {
		return nil
	}
	var args map[string]any
	var raws map[string]json.RawMessage // as sent, for messages
	if json.Unmarshal(payload, &args) != nil || json.Unmarshal(payload, &raws) != nil {
		return nil // not an object: DecodePayload refuses it with its own message
	}
	var wrong []string
	for i, p := range s.Params {
		v, ok := args[p.Name]
		if !ok || s.check[i].Validate(v) == nil {
			continue
		}
		got, desc := kindOf(raws[p.Name])
		msg := fmt.Sprintf("argument %q: expected %s, got %s", p.Name, p.Type, desc)
		if got&p.Accepts != 0 {
			// The value is of a kind the type takes: what is wrong is inside it.
			if where := locate(p.schema, v, p.Name); where != "" {
				msg += " (" + where + ")"
			}
		}
		wrong = append(wrong, msg)
	}
	if len(wrong) == 0 {
		return nil
	}
	return &runtimes.ArgumentError{Message: strings.Join(wrong, "; ") + "; fix the payload (the types come from main's signature)"}
}

// kindOf says what a JSON value is, and how a message shows it.
func kindOf(v json.RawMessage) (Kind, string) {
	text := strings.TrimSpace(string(v))
	if text == "" {
		return 0, "nothing"
	}
	switch text[0] {
	case '"':
		return String, "string " + abbreviate(text, 40)
	case 't', 'f':
		return Bool, "boolean " + text
	case 'n':
		return Null, "null"
	case '[':
		return List, "array"
	case '{':
		return Object, "object"
	}
	if strings.ContainsAny(text, ".eE") {
		return Float, "number " + abbreviate(text, 40)
	}
	return Int | Float, "number " + abbreviate(text, 40)
}

func abbreviate(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

var squashSpace = regexp.MustCompile(`\s+`)

func squash(s string) string { return squashSpace.ReplaceAllString(strings.TrimSpace(s), " ") }

// ---------------------------------------------------------------------------
// Python

var (
	pyMain = regexp.MustCompile(`(?m)^(?:async[ \t]+)?def[ \t]+main[ \t]*\(`)
	// Ways main can be something else than the def this reader sees.
	pyOtherMain = regexp.MustCompile(`(?m)^(?:main[ \t]*(?::[^=\n]*)?=[^=]|(?:from[ \t]+\S+[ \t]+)?import[ \t].*\bmain\b)`)
	pyIdent     = regexp.MustCompile(`^[\p{L}_][\p{L}\p{N}_]*`)
)

func readPython(src string) []Param {
	found := pyMain.FindAllStringIndex(src, -1)
	if len(found) == 0 || pyOtherMain.MatchString(src) {
		return nil
	}
	at := found[len(found)-1] // Python keeps the last definition
	if decorated(src[:at[0]]) {
		return nil
	}
	inner, ok := enclosed(src, at[1]-1, python)
	if !ok {
		return nil
	}
	inner = blankComments(inner, python)
	var params []Param
	for _, piece := range splitTop(inner, ',', python) {
		piece = strings.TrimSpace(piece)
		if piece == "" || strings.HasPrefix(piece, "*") || piece == "/" {
			continue // *args, **kwargs, the markers of keyword-only and positional-only
		}
		name := pyIdent.FindString(piece)
		if name == "" {
			continue
		}
		rest := strings.TrimSpace(piece[len(name):])
		if !strings.HasPrefix(rest, ":") {
			// No annotation: nothing to check, but still a parameter.
			_, def, hasDef := cutTop(rest, '=', python)
			params = append(params, Param{Name: name, Default: squash(def), Optional: hasDef})
			continue
		}
		typ, def, hasDef := cutTop(rest[1:], '=', python)
		schema := typeSchema(typ, python)
		if strings.TrimSpace(def) == "None" {
			schema = withNull(schema) // `top: int = None` means "or None", as type checkers used to read it
		}
		params = append(params, Param{Name: name, Accepts: kindsOf(schema), Type: squash(typ), Default: squash(def), Optional: hasDef, schema: schema})
	}
	return params
}

// decorated reports whether the def that follows before is decorated: a decorator may give
// main any signature.
func decorated(before string) bool {
	lines := strings.Split(strings.TrimRight(before, " \t\n"), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	return strings.HasPrefix(last, "@")
}

// ---------------------------------------------------------------------------
// TypeScript

var (
	tsMain = regexp.MustCompile(`(?m)^[ \t]*export[ \t]+(?:default[ \t]+)?(?:async[ \t]+)?function[ \t]*\*?[ \t]*main[ \t]*\(` +
		`|^[ \t]*export[ \t]+(?:const|let|var)[ \t]+main[ \t]*=[ \t]*(?:async[ \t]*)?(?:function[ \t]*\*?[ \t]*(?:main)?[ \t]*)?\(`)
	tsIdent = regexp.MustCompile(`^[\p{L}_$][\p{L}\p{N}_$]*`)
)

func readTS(src string) []Param {
	found := tsMain.FindAllStringIndex(src, -1)
	if len(found) != 1 {
		return nil // none, or overloads: which one binds is not plain
	}
	inner, ok := enclosed(src, found[0][1]-1, typescript)
	if !ok {
		return nil
	}
	inner = blankComments(inner, typescript)
	aliases := tsAliases(src)
	var params []Param
	for _, piece := range splitTop(inner, ',', typescript) {
		piece = strings.TrimSpace(piece)
		name := tsIdent.FindString(piece)
		if name == "" || name == "this" {
			continue // destructuring and rest parameters are bound by the shim as a whole
		}
		rest := strings.TrimSpace(piece[len(name):])
		optional := strings.HasPrefix(rest, "?")
		rest = strings.TrimSpace(strings.TrimPrefix(rest, "?"))
		if !strings.HasPrefix(rest, ":") {
			_, def, hasDef := cutTop(rest, '=', typescript)
			params = append(params, Param{Name: name, Default: squash(def), Optional: optional || hasDef})
			continue
		}
		typ, def, hasDef := cutTop(rest[1:], '=', typescript)
		means := aliases[strings.TrimSpace(typ)]
		schema := typeSchema(cmp.Or(means, typ), typescript)
		if optional {
			schema = withNull(schema) // JSON has no undefined: a caller leaving it out may send null
		}
		params = append(params, Param{Name: name, Accepts: kindsOf(schema), Type: squash(typ), Default: squash(def), Optional: optional || hasDef, Means: squash(means), schema: schema})
	}
	return params
}

// tsAlias is a type alias declared on one line, at the start of it: `type Name = T` (export
// and a closing `;` allowed). A generic alias (`type Box<T> = …`) does not match: its meaning
// depends on its use.
var tsAlias = regexp.MustCompile(`(?m)^[ \t]*(?:export[ \t]+)?type[ \t]+([\p{L}_$][\p{L}\p{N}_$]*)[ \t]*=([^\n]*)$`)

// tsAliases maps the one-line type aliases of src to what they stand for, followed through
// aliases of aliases; an alias whose text does not close its brackets on its line (an object
// type spread over lines) is left out, since its line alone is not its meaning.
func tsAliases(src string) map[string]string {
	out := map[string]string{}
	for _, m := range tsAlias.FindAllStringSubmatch(blankComments(src, typescript), -1) {
		text := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(m[2]), ";"))
		if text == "" || !walk(text, typescript, func(int, int) bool { return true }) {
			continue
		}
		out[m[1]] = text
	}
	for range 4 { // an alias of an alias, a few deep
		for name, text := range out {
			if next, ok := out[text]; ok && next != text {
				out[name] = next
			}
		}
	}
	return out
}

var tsNumber = regexp.MustCompile(`^-?[0-9][0-9_]*(\.[0-9_]+)?([eE][-+]?[0-9]+)?$`)

// ---------------------------------------------------------------------------
// Scanning: brackets, strings and comments of either language.

type lang int

const (
	python lang = iota
	typescript
)

// skip returns the index just past a string or comment starting at s[i], or i when none does.
func skip(s string, i int, l lang) int {
	c := s[i]
	switch {
	case c == '#' && l == python, c == '/' && l == typescript && strings.HasPrefix(s[i:], "//"):
		if end := strings.IndexByte(s[i:], '\n'); end >= 0 {
			return i + end
		}
		return len(s)
	case c == '/' && l == typescript && strings.HasPrefix(s[i:], "/*"):
		if end := strings.Index(s[i+2:], "*/"); end >= 0 {
			return i + 2 + end + 2
		}
		return len(s)
	case c == '"' || c == '\'' || c == '`' && l == typescript:
		quote := string(c)
		if l == python && strings.HasPrefix(s[i:], strings.Repeat(quote, 3)) {
			quote = strings.Repeat(quote, 3)
		}
		for j := i + len(quote); j < len(s); j++ {
			if s[j] == '\\' {
				j++
				continue
			}
			if strings.HasPrefix(s[j:], quote) {
				return j + len(quote)
			}
		}
		return len(s)
	}
	return i
}

// blankComments replaces the comments in s by spaces, so that a parameter's text starts with
// its name and a type reads as written.
func blankComments(s string, l lang) string {
	b := []byte(s)
	for i := 0; i < len(s); i++ {
		j := skip(s, i, l)
		if j == i {
			continue
		}
		if c := s[i]; c == '#' || c == '/' {
			for k := i; k < j; k++ {
				b[k] = ' '
			}
		}
		i = j - 1
	}
	return string(b)
}

// walk calls visit with each index of s outside strings and comments and its bracket depth
// there (the bracket itself counts at the outer depth); it reports false when the brackets
// do not balance. visit returning false stops the walk.
func walk(s string, l lang, visit func(i, depth int) bool) bool {
	depth := 0
	for i := 0; i < len(s); i++ {
		if j := skip(s, i, l); j != i {
			i = j - 1
			continue
		}
		c := s[i]
		closing := c == ')' || c == ']' || c == '}' || c == '>' && l == typescript && (i == 0 || s[i-1] != '=')
		if closing {
			depth--
			if depth < 0 {
				return false
			}
		}
		if !visit(i, depth) {
			return true
		}
		if c == '(' || c == '[' || c == '{' || c == '<' && l == typescript {
			depth++
		}
	}
	return depth == 0
}

// enclosed returns the text between the bracket at s[open] and its match.
func enclosed(s string, open int, l lang) (string, bool) {
	if open >= len(s) || s[open] != '(' {
		return "", false
	}
	end := -1
	walk(s[open:], l, func(i, depth int) bool {
		if depth == 0 && i > 0 && s[open+i] == ')' {
			end = open + i
			return false
		}
		return true
	})
	if end < 0 {
		return "", false
	}
	return s[open+1 : end], true
}

// splitTop splits s at sep outside brackets, strings and comments; nil when s does not
// balance, so that a header this scanner misreads checks nothing.
func splitTop(s string, sep byte, l lang) []string {
	var parts []string
	start := 0
	ok := walk(s, l, func(i, depth int) bool {
		if depth == 0 && s[i] == sep && !(sep == '=' && (strings.HasPrefix(s[i:], "==") || strings.HasPrefix(s[i:], "=>"))) {
			parts = append(parts, s[start:i])
			start = i + 1
		}
		return true
	})
	if !ok {
		return nil
	}
	return append(parts, s[start:])
}

// cutTop cuts s around the first sep outside brackets: a type and its default value.
func cutTop(s string, sep byte, l lang) (before, after string, found bool) {
	parts := splitTop(s, sep, l)
	if len(parts) < 2 {
		return s, "", false
	}
	return parts[0], strings.Join(parts[1:], string(sep)), true
}
