package signature

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"

	"github.com/agenthost/host/internal/runtimes"
)

// Schema is a JSON Schema (draft 2020-12) as a JSON object.
type Schema = map[string]any

// InputSchema is the JSON Schema of the arguments main takes, for a caller that is told the
// function's shape before it calls (an MCP tools/list): an object with a property per named
// parameter of main (Fields), required unless it has a default or is optional. A property's
// schema is what the parameter's type says (types, unions with null, elements of lists, values
// of dicts and Records, the members of a TypeScript object literal), and {} (any value) for a
// type this reader does not know. It is {"type": "object"} alone when main is not plain to see
// (a bash script, a decorated main).
func InputSchema(kind runtimes.Kind, src []byte) Schema {
	params := Fields(kind, src)
	l := langOf(kind)
	props := Schema{}
	var required []string
	for _, p := range params {
		s := Schema{}
		if p.Accepts != 0 {
			s = maps.Clone(p.schema)
		} else if p.Type != "" {
			s["description"] = "of type " + p.Type + ", as the source writes it"
		}
		if v, ok := defaultValue(p.Default, l); ok {
			s["default"] = v
		}
		props[p.Name] = s
		if !p.Optional {
			required = append(required, p.Name)
		}
	}
	out := Schema{"type": "object"}
	if len(params) > 0 {
		out["properties"] = props
	}
	if len(required) > 0 {
		out["required"] = required
	}
	return out
}

// OutputSchema is the JSON Schema of main's result when its declared return type is an
// object (a dict, a Record, an object literal; a Promise of one), nil otherwise: a tool's
// structured result must be an object, so other results are described by no schema.
func OutputSchema(kind runtimes.Kind, src []byte) Schema {
	l := langOf(kind)
	t := returnType(kind, string(src))
	if t == "" {
		return nil
	}
	if l == typescript {
		for {
			inner, ok := strings.CutPrefix(t, "Promise<")
			if !ok || !strings.HasSuffix(inner, ">") {
				break
			}
			t = strings.TrimSpace(strings.TrimSuffix(inner, ">"))
		}
	}
	s := typeSchema(t, l)
	if s["type"] != "object" {
		return nil
	}
	return s
}

func langOf(kind runtimes.Kind) lang {
	if kind == runtimes.Bun {
		return typescript
	}
	return python
}

// returnType is the return type main's header declares, as written; "" when none.
func returnType(kind runtimes.Kind, src string) string {
	var open int
	switch kind {
	case runtimes.Python:
		found := pyMain.FindAllStringIndex(src, -1)
		if len(found) == 0 || pyOtherMain.MatchString(src) {
			return ""
		}
		open = found[len(found)-1][1] - 1
	case runtimes.Bun:
		found := tsMain.FindAllStringIndex(src, -1)
		if len(found) != 1 {
			return ""
		}
		open = found[0][1] - 1
	default:
		return ""
	}
	l := langOf(kind)
	inner, ok := enclosed(src, open, l)
	if !ok {
		return ""
	}
	rest := strings.TrimLeft(src[open+len(inner)+2:], " \t\r\n")
	var typ string
	if l == python {
		rest, ok = strings.CutPrefix(rest, "->")
		if !ok {
			return ""
		}
		typ = upTo(rest, l, func(i int) bool { return rest[i] == ':' })
	} else {
		rest, ok = strings.CutPrefix(rest, ":")
		if !ok {
			return ""
		}
		rest = strings.TrimLeft(rest, " \t\r\n")
		if strings.HasPrefix(rest, "{") { // an object literal type, then the body
			if lit, ok := braced(rest, l); ok {
				return lit
			}
			return ""
		}
		typ = upTo(rest, l, func(i int) bool { return rest[i] == '{' || strings.HasPrefix(rest[i:], "=>") })
	}
	return squash(typ)
}

// upTo is s up to the first index outside brackets, strings and comments where stop holds.
func upTo(s string, l lang, stop func(i int) bool) string {
	end := -1
	walk(s, l, func(i, depth int) bool {
		if depth == 0 && stop(i) {
			end = i
			return false
		}
		return true
	})
	if end < 0 {
		return ""
	}
	return s[:end]
}

// braced is the text of s from its opening '{' to the matching '}', both included.
func braced(s string, l lang) (string, bool) {
	end := -1
	walk(s, l, func(i, depth int) bool {
		if i > 0 && depth == 0 && s[i] == '}' {
			end = i
			return false
		}
		return true
	})
	if end < 0 {
		return "", false
	}
	return s[:end+1], true
}

// typeSchema is the schema of a type as the source writes it; {} for one not known.
func typeSchema(t string, l lang) Schema {
	t = strings.TrimSpace(t)
	if l == python {
		return pySchema(t)
	}
	return tsSchema(t)
}

func pySchema(t string) Schema {
	if len(t) >= 2 && (t[0] == '"' || t[0] == '\'') && t[len(t)-1] == t[0] {
		return pySchema(t[1 : len(t)-1])
	}
	if parts := splitTop(t, '|', python); len(parts) > 1 {
		return unionSchema(parts, pySchema)
	}
	base, args, sub := strings.Cut(t, "[")
	base = strings.TrimPrefix(strings.TrimSpace(base), "typing.")
	if sub {
		args = strings.TrimSuffix(strings.TrimSpace(args), "]")
	}
	switch base {
	case "str":
		return Schema{"type": "string"}
	case "int":
		return Schema{"type": "integer"}
	case "float":
		return Schema{"type": "number"}
	case "bool":
		return Schema{"type": "boolean"}
	case "None":
		return Schema{"type": "null"}
	case "list", "List":
		s := Schema{"type": "array"}
		if sub && args != "" {
			s["items"] = pySchema(args)
		}
		return s
	case "dict", "Dict":
		s := Schema{"type": "object"}
		if kv := splitTop(args, ',', python); sub && len(kv) == 2 {
			s["additionalProperties"] = pySchema(kv[1])
		}
		return s
	case "Optional":
		return withNull(pySchema(args))
	case "Union":
		return unionSchema(splitTop(args, ',', python), pySchema)
	}
	return Schema{}
}

func tsSchema(t string) Schema {
	t = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(t), "|"))
	if inner, ok := enclosed(t, 0, typescript); ok && len(inner)+2 == len(t) {
		return tsSchema(inner)
	}
	if parts := splitTop(t, '|', typescript); len(parts) > 1 {
		return unionSchema(parts, tsSchema)
	}
	switch {
	case t == "string":
		return Schema{"type": "string"}
	case len(t) >= 2 && t[0] == '`' && t[len(t)-1] == '`' && strings.Contains(t, "${"):
		return Schema{"type": "string"} // a template literal type: a pattern of strings
	case len(t) >= 2 && strings.ContainsRune("\"'`", rune(t[0])) && t[len(t)-1] == t[0]:
		return Schema{"type": "string", "enum": []any{t[1 : len(t)-1]}}
	case t == "number":
		return Schema{"type": "number"}
	case tsNumber.MatchString(t):
		var n json.Number = json.Number(strings.ReplaceAll(t, "_", ""))
		return Schema{"type": "number", "enum": []any{n}}
	case t == "boolean":
		return Schema{"type": "boolean"}
	case t == "true" || t == "false":
		return Schema{"type": "boolean", "enum": []any{t == "true"}}
	case t == "null" || t == "undefined":
		return Schema{"type": "null"}
	case strings.HasSuffix(t, "[]"):
		return Schema{"type": "array", "items": tsSchema(strings.TrimSuffix(t, "[]"))}
	case strings.HasPrefix(t, "Array<") && strings.HasSuffix(t, ">"):
		return Schema{"type": "array", "items": tsSchema(t[len("Array<") : len(t)-1])}
	case strings.HasPrefix(t, "ReadonlyArray<") && strings.HasSuffix(t, ">"):
		return Schema{"type": "array", "items": tsSchema(t[len("ReadonlyArray<") : len(t)-1])}
	case t == "object":
		return Schema{"type": []any{"object", "array"}} // an array is an object to TypeScript
	case t == "{}" || squash(t) == "{ }":
		return Schema{} // any value but null and undefined
	case strings.HasPrefix(t, "Record<") && strings.HasSuffix(t, ">"):
		s := Schema{"type": "object"}
		if kv := splitTop(t[len("Record<"):len(t)-1], ',', typescript); len(kv) == 2 {
			s["additionalProperties"] = tsSchema(kv[1])
		}
		return s
	case strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}"):
		return tsObject(t[1 : len(t)-1])
	}
	return Schema{}
}

// tsObject is the schema of the members of an object literal type ("a: string; b?: number").
func tsObject(body string) Schema {
	body = blankComments(body, typescript)
	props := Schema{}
	var required []string
	// Members end at ";", "," or a line's end.
	var members []string
	for _, semi := range splitTop(body, ';', typescript) {
		for _, comma := range splitTop(semi, ',', typescript) {
			members = append(members, splitTop(comma, '\n', typescript)...)
		}
	}
	for _, m := range members {
		m = strings.TrimSpace(m)
		if m == "" {
			continue
		}
		name, typ, ok := cutTop(m, ':', typescript)
		name = strings.TrimSpace(name)
		if !ok || strings.HasPrefix(name, "[") || strings.HasSuffix(name, ")") {
			return Schema{"type": "object"} // an index signature, a method: not plain
		}
		optional := strings.HasSuffix(name, "?")
		name = strings.Trim(strings.TrimSuffix(name, "?"), `"'`)
		if !tsIdent.MatchString(name) {
			return Schema{"type": "object"}
		}
		props[name] = tsSchema(typ)
		if !optional {
			required = append(required, name)
		}
	}
	s := Schema{"type": "object"}
	if len(props) > 0 {
		s["properties"] = props
	}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

// unionSchema is the schema of a union: one alternative with null as that one's schema with
// null added, literals of one type as one enum, and anything else as anyOf.
func unionSchema(parts []string, of func(string) Schema) Schema {
	var alts []Schema
	null := false
	for _, p := range parts {
		s := of(p)
		if len(s) == 0 {
			return Schema{} // one alternative is any value: so is the union
		}
		if s["type"] == "null" && len(s) == 1 {
			null = true
			continue
		}
		alts = append(alts, s)
	}
	var out Schema
	switch {
	case len(alts) == 0:
		return Schema{"type": "null"}
	case len(alts) == 1:
		out = alts[0]
	case sameEnum(alts):
		var values []any
		for _, a := range alts {
			values = append(values, a["enum"].([]any)...)
		}
		out = Schema{"type": alts[0]["type"], "enum": values}
	default:
		var anyOf []any
		for _, a := range alts {
			anyOf = append(anyOf, a)
		}
		out = Schema{"anyOf": anyOf}
	}
	if null {
		out = withNull(out)
	}
	return out
}

func sameEnum(alts []Schema) bool {
	for _, a := range alts {
		if _, ok := a["enum"]; !ok || len(a) != 2 || a["type"] != alts[0]["type"] {
			return false
		}
	}
	return true
}

// withNull is s accepting null too.
func withNull(s Schema) Schema {
	if acceptsNull(s) {
		return s
	}
	out := Schema{}
	for k, v := range s {
		out[k] = v
	}
	switch t := s["type"].(type) {
	case string:
		if t != "null" {
			out["type"] = []any{t, "null"}
		}
	case []any:
		out["type"] = append(append([]any(nil), t...), "null")
	default:
		if alts, ok := s["anyOf"].([]any); ok {
			out["anyOf"] = append(append([]any(nil), alts...), Schema{"type": "null"})
		} else if len(s) == 0 {
			return s // any value already
		}
	}
	if e, ok := out["enum"].([]any); ok {
		out["enum"] = append(append([]any(nil), e...), nil)
	}
	return out
}

func acceptsNull(s Schema) bool {
	switch t := s["type"].(type) {
	case string:
		return t == "null"
	case []any:
		return slices.Contains(t, any("null"))
	}
	if alts, ok := s["anyOf"].([]any); ok {
		for _, a := range alts {
			if a, ok := a.(Schema); ok && acceptsNull(a) {
				return true
			}
		}
	}
	return false
}

// defaultValue is a default as the source writes it, as a JSON value, when it is a literal.
func defaultValue(src string, l lang) (any, bool) {
	if src == "" {
		return nil, false
	}
	if l == python {
		switch src {
		case "True":
			return true, true
		case "False":
			return false, true
		case "None":
			return nil, true
		}
	} else if src == "undefined" {
		return nil, false
	} else if len(src) >= 2 && src[0] == '`' && src[len(src)-1] == '`' && !strings.ContainsAny(src[1:len(src)-1], "`\\$") {
		return src[1 : len(src)-1], true // a template literal without substitutions or escapes
	}
	if len(src) >= 2 && src[0] == '\'' && src[len(src)-1] == '\'' && !strings.ContainsAny(src[1:len(src)-1], `'"\`) {
		return src[1 : len(src)-1], true // a single-quoted string without escapes, in either language
	}
	var v any
	if err := json.Unmarshal([]byte(src), &v); err != nil {
		return nil, false
	}
	return v, true
}

// Example is a small JSON value of p's type, to show a person its shape before they type it
// (a run form's placeholder): `{"key":"text"}` for Record<string, string>, `[1]` for int[].
// It is "" when the type is not read.
func (p Param) Example() string {
	if p.Accepts == 0 {
		return ""
	}
	b, err := json.Marshal(example(p.schema, 0))
	if err != nil {
		return ""
	}
	return string(b)
}

// example is a value s takes: the first of an enum or a union, null only when nothing else.
func example(s Schema, depth int) any {
	if depth > 4 {
		return nil
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		return e[0]
	}
	if alts, ok := s["anyOf"].([]any); ok {
		for _, a := range alts {
			if v := example(a.(Schema), depth+1); v != nil {
				return v
			}
		}
		return nil
	}
	types, _ := s["type"].([]any)
	if t, ok := s["type"].(string); ok {
		types = []any{t}
	}
	for _, t := range types {
		switch t {
		case "string":
			return "text"
		case "integer":
			return 1
		case "number":
			return 1.5
		case "boolean":
			return true
		case "array":
			items, _ := s["items"].(Schema)
			return []any{example(items, depth+1)}
		case "object":
			out := map[string]any{}
			if props, ok := s["properties"].(Schema); ok {
				for name, sub := range props {
					out[name] = example(sub.(Schema), depth+1)
				}
			} else if ap, ok := s["additionalProperties"].(Schema); ok {
				out["key"] = example(ap, depth+1)
			}
			return out
		}
	}
	return nil
}
