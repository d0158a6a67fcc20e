package signature

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/agenthost/host/internal/secrets"
)

// kindsOf is the set of JSON kinds a schema takes at its top level; 0 when it takes any value
// (a type this reader does not know, or a union with one).
func kindsOf(s Schema) Kind {
	if alts, ok := s["anyOf"].([]any); ok {
		var all Kind
		for _, a := range alts {
			k := kindsOf(a.(Schema))
			if k == 0 {
				return 0
			}
			all |= k
		}
		return all
	}
	var all Kind
	switch t := s["type"].(type) {
	case string:
		all = kindOfType(t)
	case []any:
		for _, name := range t {
			all |= kindOfType(name.(string))
		}
	}
	return all
}

func kindOfType(t string) Kind {
	switch t {
	case "string":
		return String
	case "integer":
		return Int
	case "number":
		return Float
	case "boolean":
		return Bool
	case "array":
		return List
	case "object":
		return Object
	case "null":
		return Null
	}
	return 0
}

// secretRef is what a "$secret:<name>" reference is: a string the runner replaces, at any
// depth, with the secret's value once the check has passed.
var secretRef = Schema{"type": "string", "pattern": "^" + strings.ReplaceAll(secrets.RefPrefix, "$", `\$`)}

// lenient is s taking a secret reference in place of any value, at any depth.
func lenient(s Schema) Schema {
	if len(s) == 0 {
		return s
	}
	out := maps.Clone(s)
	for _, k := range []string{"items", "additionalProperties"} {
		if sub, ok := s[k].(Schema); ok {
			out[k] = lenient(sub)
		}
	}
	if props, ok := s["properties"].(Schema); ok {
		lp := Schema{}
		for name, sub := range props {
			lp[name] = lenient(sub.(Schema))
		}
		out["properties"] = lp
	}
	if alts, ok := s["anyOf"].([]any); ok {
		la := make([]any, len(alts))
		for i, a := range alts {
			la[i] = lenient(a.(Schema))
		}
		out["anyOf"] = la
	}
	return Schema{"anyOf": []any{secretRef, out}}
}

// resolve makes a validator of s.
func resolve(s Schema) (*jsonschema.Resolved, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	var js jsonschema.Schema
	if err := json.Unmarshal(b, &js); err != nil {
		return nil, err
	}
	return js.Resolve(nil)
}

// valid reports whether v (a decoded JSON value) is what s describes, a secret reference
// standing for any value.
func valid(s Schema, v any) bool {
	r, err := resolve(lenient(s))
	return err != nil || r.Validate(v) == nil
}

// locate says where inside v, a value of a kind s takes, it goes wrong: "xs[1]: expected
// string, got number 2", "o.mode: missing"; "" when it is v itself (a literal it is not one
// of, a union it matches no member of).
func locate(s Schema, v any, at string) string {
	switch v := v.(type) {
	case []any:
		if items, ok := s["items"].(Schema); ok {
			for i, e := range v {
				if !valid(items, e) {
					return inside(items, e, fmt.Sprintf("%s[%d]", at, i))
				}
			}
		}
	case map[string]any:
		if req, ok := s["required"].([]string); ok {
			for _, name := range req {
				if _, ok := v[name]; !ok {
					return at + "." + name + ": missing"
				}
			}
		}
		props, _ := s["properties"].(Schema)
		for _, k := range slices.Sorted(maps.Keys(v)) {
			sub, ok := props[k].(Schema)
			if !ok {
				sub, ok = s["additionalProperties"].(Schema)
			}
			if ok && !valid(sub, v[k]) {
				return inside(sub, v[k], at+"."+k)
			}
		}
	}
	return ""
}

// inside is where v, at at, goes wrong against s: deeper in it, or v itself.
func inside(s Schema, v any, at string) string {
	if where := locate(s, v, at); where != "" {
		return where
	}
	return fmt.Sprintf("%s: expected %s, got %s", at, describe(s), describeValue(v))
}

// describe says what s takes, in JSON's words.
func describe(s Schema) string {
	if e, ok := s["enum"].([]any); ok {
		var vs []string
		for _, v := range e {
			b, _ := json.Marshal(v)
			vs = append(vs, string(b))
		}
		return strings.Join(vs, " or ")
	}
	if alts, ok := s["anyOf"].([]any); ok {
		var ds []string
		for _, a := range alts {
			ds = append(ds, describe(a.(Schema)))
		}
		return strings.Join(ds, " or ")
	}
	switch t := s["type"].(type) {
	case string:
		return t
	case []any:
		var ts []string
		for _, name := range t {
			ts = append(ts, name.(string))
		}
		return strings.Join(ts, " or ")
	}
	return "any value"
}

// describeValue is how a message shows a decoded JSON value.
func describeValue(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) != nil {
		return "a value"
	}
	_, desc := kindOf(bytes.TrimSpace(b.Bytes()))
	return desc
}
