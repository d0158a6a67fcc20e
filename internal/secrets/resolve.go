package secrets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// ParseRef reports whether s is a secret reference, exactly "$secret:<name>",
// and returns the name (which the caller still validates through Get).
func ParseRef(s string) (name string, ok bool) {
	return strings.CutPrefix(s, RefPrefix)
}

// ErrUndeclared is wrapped by the error for a "$secret:" argument that the
// function does not declare.
var ErrUndeclared = errors.New("secret not declared by the function")

// Refs returns the names of the secrets args refers to ("$secret:<name>"
// strings at any depth), sorted and without duplicates, without reading the
// store: the caller checks them against what the function declares first.
func Refs(args map[string]any) []string {
	seen := map[string]bool{}
	leaves(map[string]any(args), func(leaf any) {
		if s, ok := leaf.(string); ok {
			if name, ok := ParseRef(s); ok {
				seen[name] = true
			}
		}
	})
	return slices.Sorted(maps.Keys(seen))
}

// ResolveArgs returns a copy of args in which every string that is exactly
// "$secret:<name>", at any depth of objects and arrays, is replaced by the
// stored JSON value (decoded with json.Number for numbers, so that re-encoding
// keeps them exact), and a Redactor for every resolved value. args itself is
// not modified. A missing secret is an error naming the argument and the
// secret, wrapping ErrNotFound; errors never carry a value.
//
// declared says which names the receiving function may get; a reference to
// any other is an error wrapping ErrUndeclared, raised before any secret is
// read, so that a caller cannot pull a secret through a function that never
// asked for it. A nil declared allows none.
func (s *Store) ResolveArgs(ctx context.Context, args map[string]any, declared func(name string) bool) (map[string]any, *Redactor, error) {
	for _, name := range Refs(args) {
		if declared == nil || !declared(name) {
			return nil, nil, fmt.Errorf("secret %q: %w", name, ErrUndeclared)
		}
	}
	r := &resolver{s: s, ctx: ctx, red: NewRedactor(), cache: map[string]any{}}
	out, err := r.walk(args, "")
	if err != nil {
		return nil, nil, err
	}
	m, _ := out.(map[string]any)
	if m == nil && args != nil {
		m = map[string]any{}
	}
	return m, r.red, nil
}

type resolver struct {
	s     *Store
	ctx   context.Context
	red   *Redactor
	cache map[string]any // name -> decoded value; one read per name and call
}

func (r *resolver) walk(v any, path string) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		if x == nil {
			return x, nil
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			p := k
			if path != "" {
				p = path + "." + k
			}
			nv, err := r.walk(e, p)
			if err != nil {
				return nil, err
			}
			out[k] = nv
		}
		return out, nil
	case []any:
		if x == nil {
			return x, nil
		}
		out := make([]any, len(x))
		for i, e := range x {
			nv, err := r.walk(e, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			out[i] = nv
		}
		return out, nil
	case string:
		name, ok := ParseRef(x)
		if !ok {
			return x, nil
		}
		if dv, ok := r.cache[name]; ok {
			return dv, nil
		}
		raw, err := r.s.Get(r.ctx, name)
		if err != nil {
			return nil, fmt.Errorf("argument %s: %w", path, err)
		}
		dv, err := decodeJSON(raw)
		if err != nil {
			return nil, fmt.Errorf("argument %s: secret %q: %w", path, name, err)
		}
		r.red.Add(raw)
		r.cache[name] = dv
		return dv, nil
	default:
		return v, nil
	}
}

func decodeJSON(raw []byte) (any, error) {
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, errors.New("stored value is not valid JSON; set it again")
	}
	return v, nil
}

// Resolve returns secret name as an environment value, for `env:` lines: a
// JSON string is unquoted, any other JSON value is its compact JSON text. The
// Redactor covers the value in every form.
func (s *Store) Resolve(ctx context.Context, name string) (string, *Redactor, error) {
	raw, err := s.Get(ctx, name)
	if err != nil {
		return "", nil, err
	}
	val, err := envValue(raw)
	if err != nil {
		return "", nil, fmt.Errorf("secret %q: %w", name, err)
	}
	red := NewRedactor()
	red.Add(raw)
	return val, red, nil
}

func envValue(raw json.RawMessage) (string, error) {
	var str string
	if err := json.Unmarshal(raw, &str); err == nil {
		if strings.ContainsRune(str, 0) {
			return "", errors.New("a string with a NUL character cannot be an environment value")
		}
		return str, nil
	}
	compact, err := compactJSON(raw)
	if err != nil {
		return "", errors.New("stored value is not valid JSON; set it again")
	}
	return string(compact), nil
}

// ResolveField is Resolve for a reference that may name a field: "anthropic.apiKey" is the
// secret of that whole name if there is one, else the field apiKey of the JSON object stored
// under "anthropic" (secret names may hold dots, so the whole name is tried first). The
// Redactor covers the value returned.
func (s *Store) ResolveField(ctx context.Context, ref string) (string, *Redactor, error) {
	val, red, err := s.Resolve(ctx, ref)
	i := strings.LastIndexByte(ref, '.')
	if err == nil || !errors.Is(err, ErrNotFound) || i < 0 {
		return val, red, err
	}
	name, field := ref[:i], ref[i+1:]
	raw, gerr := s.Get(ctx, name)
	if errors.Is(gerr, ErrNotFound) {
		return "", nil, fmt.Errorf("%w (nor is there a secret %q with a field %q)", err, name, field)
	}
	if gerr != nil {
		return "", nil, gerr
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		return "", nil, fmt.Errorf("secret %q is not a JSON object, so it has no field %q: %w", name, field, ErrNotFound)
	}
	fv, ok := obj[field]
	if !ok {
		return "", nil, fmt.Errorf("secret %q has no field %q (its fields: %s): %w", name, field,
			strings.Join(slices.Sorted(maps.Keys(obj)), ", "), ErrNotFound)
	}
	if val, err = envValue(fv); err != nil {
		return "", nil, fmt.Errorf("secret %q, field %q: %w", name, field, err)
	}
	red = NewRedactor()
	red.Add(fv)
	return val, red, nil
}
