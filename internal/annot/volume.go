package annot

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxVolumes bounds the mounts per job; each one is a bind mount and a
// store lookup on every run.
const maxVolumes = 10

// safeName is the contract's rule for an expanded volume name. It keeps
// names usable as a single path component and as a store key: no "/", no
// "..", no leading dot or dash, at most 255 bytes.
var safeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,253}[A-Za-z0-9]$`)

// safeNameRule explains safeName to users.
const safeNameRule = "it must be 2 to 255 characters of letters, digits, '.', '_' and '-', starting and ending with a letter or digit"

// Vars are what a volume name template can refer to.
type Vars struct {
	Workspace, Function string
	Args                map[string]any // the decoded JSON payload
}

// part is one piece of a volume name template: literal text, or a variable
// ("workspace", "name" or "args" with the key path in args).
type part struct {
	lit  string
	name string
	args []string
}

// parseTemplate splits a volume name template into literal text and
// variables. Variable names are letters only, so "$name_v2" is $name
// followed by "_v2" (there is no ${...} form to delimit them otherwise).
func parseTemplate(tmpl string) ([]part, error) {
	var parts []part
	for i := 0; i < len(tmpl); {
		c := tmpl[i]
		if c != '$' {
			j := i
			for j < len(tmpl) && isNameByte(tmpl[j]) {
				j++
			}
			if j == i {
				r, _ := utf8.DecodeRuneInString(tmpl[i:])
				return nil, fmt.Errorf("volume name %q contains %q; only letters, digits, '.', '_', '-' and the variables $workspace, $name and $args[key] are allowed", tmpl, r)
			}
			parts = append(parts, part{lit: tmpl[i:j]})
			i = j
			continue
		}
		j := i + 1
		for j < len(tmpl) && isLetter(tmpl[j]) {
			j++
		}
		switch ident := tmpl[i+1 : j]; ident {
		case "workspace", "name":
			parts = append(parts, part{name: ident})
			i = j
		case "args":
			key, n, err := parseArgsKey(tmpl, tmpl[j:])
			if err != nil {
				return nil, err
			}
			parts = append(parts, part{name: ident, args: key})
			i = j + n
		case "":
			return nil, fmt.Errorf("volume name %q has a \"$\" that is not followed by a variable; use $workspace, $name or $args[key]", tmpl)
		default:
			return nil, fmt.Errorf("volume name %q uses unknown variable \"$%s\"; use $workspace, $name or $args[key]", tmpl, ident)
		}
	}
	return parts, nil
}

// argSegment is one step of an $args key path.
var argSegment = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// parseArgsKey reads the "[a.b.c]" after "$args" at the start of rest and
// returns the key path and how many bytes it took.
func parseArgsKey(tmpl, rest string) ([]string, int, error) {
	end := strings.IndexByte(rest, ']')
	if !strings.HasPrefix(rest, "[") || end < 0 {
		return nil, 0, fmt.Errorf("volume name %q uses $args without a key; write $args[key] or $args[a.b] for a nested key", tmpl)
	}
	key := rest[1:end]
	segs := strings.Split(key, ".")
	for _, s := range segs {
		if !argSegment.MatchString(s) {
			return nil, 0, fmt.Errorf("volume name %q has a bad argument key %q; keys are letters, digits, '_' and '-', with '.' between nested keys", tmpl, key)
		}
	}
	return segs, end + 1, nil
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

func isNameByte(c byte) bool {
	return isLetter(c) || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-'
}

func isAlnum(c byte) bool { return isLetter(c) || '0' <= c && c <= '9' }

// checkTemplate is the parse-time check of a volume name. A name without
// variables is checked in full now; with variables, only what no expansion
// can fix: a bad edge character or a literal part that is already too long.
func checkTemplate(tmpl string) error {
	parts, err := parseTemplate(tmpl)
	if err != nil {
		return err
	}
	lits, vars := 0, 0
	for _, p := range parts {
		if p.name != "" {
			vars++
		}
		lits += len(p.lit)
	}
	if vars == 0 {
		if !safeName.MatchString(tmpl) {
			return fmt.Errorf("volume name %q is not a safe volume name (%s)", tmpl, safeNameRule)
		}
		return nil
	}
	first, last := parts[0].lit, parts[len(parts)-1].lit
	if first != "" && !isAlnum(first[0]) || last != "" && !isAlnum(last[len(last)-1]) || lits > 255 {
		return fmt.Errorf("volume name %q can never expand to a safe volume name (%s)", tmpl, safeNameRule)
	}
	return nil
}

// Expand fills in a volume name template and validates the result against
// the contract's rule, so that the payload of a run can never pick a name
// that escapes the volume store (e.g. "../../etc").
func (v Volume) Expand(vars Vars) (string, error) {
	parts, err := parseTemplate(v.Name)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, p := range parts {
		switch p.name {
		case "":
			b.WriteString(p.lit)
		case "workspace":
			b.WriteString(vars.Workspace)
		case "name":
			b.WriteString(vars.Function)
		case "args":
			s, err := argString(vars.Args, p.args)
			if err != nil {
				return "", fmt.Errorf("volume name %q %w", v.Name, err)
			}
			b.WriteString(s)
		}
	}
	name := b.String()
	if !safeName.MatchString(name) {
		return "", fmt.Errorf("volume name %q expands to %q, which is not a safe volume name (%s)", v.Name, abbrev(name), safeNameRule)
	}
	return name, nil
}

// argString looks up a key path in the payload and renders it for a name.
// Its errors read as the rest of a sentence starting with the template.
func argString(args map[string]any, key []string) (string, error) {
	full := strings.Join(key, ".")
	var cur any = args
	for i, seg := range key {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", fmt.Errorf("needs argument %q, but %q in the payload is %s, not an object", full, strings.Join(key[:i], "."), kind(cur))
		}
		if cur, ok = m[seg]; !ok {
			return "", fmt.Errorf("needs argument %q, which the payload does not have", full)
		}
	}
	if s, ok := scalarString(cur); ok {
		return s, nil
	}
	return "", fmt.Errorf("uses argument %q, which is %s; only strings, numbers and booleans can go into a volume name", full, kind(cur))
}

// scalarString renders a JSON scalar. Numbers print as integers when they
// are whole, so {"id": 42} gives "42" and not "42.0" or "4.2e+01".
func scalarString(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case bool:
		return strconv.FormatBool(v), true
	case float64:
		return formatFloat(v)
	case json.Number:
		return formatNumber(v)
	case int:
		return strconv.Itoa(v), true
	case int64:
		return strconv.FormatInt(v, 10), true
	}
	return "", false
}

func formatFloat(f float64) (string, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "", false
	}
	// 'f' with precision -1 is the shortest decimal that round-trips and
	// never uses an exponent, which a volume name could not hold anyway.
	return strconv.FormatFloat(f, 'f', -1, 64), true
}

// integer is a JSON integer literal; kept as written so that ids too large
// for a float64 keep their digits.
var integer = regexp.MustCompile(`^-?[0-9]+$`)

func formatNumber(n json.Number) (string, bool) {
	if integer.MatchString(string(n)) {
		return string(n), true
	}
	f, err := n.Float64()
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return "", false
	}
	return formatFloat(f)
}

// kind names a decoded JSON value's type for error messages.
func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case float64, json.Number, int, int64:
		return "a number"
	}
	return fmt.Sprintf("a %T", v)
}

// abbrev shortens a value for an error message, since a payload can make it
// arbitrarily long.
func abbrev(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d bytes)", s[:cut], len(s))
}

// cleanVolumePath checks a mount path and returns it cleaned. Paths are
// confined to the job directory: relative, without "..", and not the job
// directory itself, which holds the job's own files.
func cleanVolumePath(p string) (string, error) {
	if strings.IndexFunc(p, unicode.IsControl) >= 0 {
		return "", fmt.Errorf("path %q contains a control character", p)
	}
	if strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("path %q is absolute; give a path relative to the job directory, e.g. \"data\"", p)
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == ".." {
			return "", fmt.Errorf("path %q contains \"..\"; volumes must stay inside the job directory", p)
		}
	}
	clean := path.Clean(p)
	if clean == "." {
		return "", fmt.Errorf("path %q is the job directory itself; mount the volume in a subdirectory, e.g. \"data\"", p)
	}
	return clean, nil
}

// overlap reports whether a new mount at dir collides with the mount v,
// since one bind mount would hide the other.
func overlap(dir string, v Volume) error {
	switch {
	case dir == v.Path:
		return fmt.Errorf("path %q is already used by the volume on line %d", dir, v.Line)
	case strings.HasPrefix(dir, v.Path+"/"):
		return fmt.Errorf("path %q is inside %q, the volume on line %d; volumes must not be nested", dir, v.Path, v.Line)
	case strings.HasPrefix(v.Path, dir+"/"):
		return fmt.Errorf("path %q contains %q, the volume on line %d; volumes must not be nested", dir, v.Path, v.Line)
	}
	return nil
}
