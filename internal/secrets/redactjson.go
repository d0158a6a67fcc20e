package secrets

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ErrNotJSON is returned by RedactJSON for text that is not one JSON value.
var ErrNotJSON = errors.New("not valid JSON")

// RedactJSON redacts the JSON value b by value, not by byte: every string in
// it, object keys included, is decoded, redacted as Redact redacts text, and
// encoded again; a number whose text is a secret's (a PIN returned as a number)
// is replaced as a whole by the string "[REDACTED]". Nothing else changes: a
// number that merely holds a secret's digits (5432 in 154321), true, false and
// null, the structure, and the bytes of every token without a secret stay as
// they were. So the output is valid JSON, as b was, and a caller parsing it
// finds the same shape with the secrets gone. Two keys of one object that both
// become "[REDACTED]" are told apart ("[REDACTED] 2"), so no member is lost to
// a duplicate key. ErrNotJSON when b is not one JSON value.
func (r *Redactor) RedactJSON(b []byte) ([]byte, error) {
	if !json.Valid(b) {
		return nil, ErrNotJSON
	}
	if r == nil {
		return b, nil
	}
	p := r.pats.Load()
	if p == nil || len(p.list) == 0 {
		return b, nil
	}
	// A secret in a string without escapes, or a secret number, is in b as it
	// is: with no match in b and no escape that could spell one, nothing changes.
	if findSpans(b, p.list) == nil && bytes.IndexByte(b, '\\') < 0 {
		return b, nil
	}
	type frame struct {
		object    bool
		expectKey bool
		redacted  map[string]bool // keys this object got by redaction
	}
	var stack []*frame
	top := func() *frame {
		if len(stack) == 0 {
			return nil
		}
		return stack[len(stack)-1]
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c == '"':
			end := stringEnd(b, i)
			tok := b[i:end]
			i = end
			var s string
			if bytes.IndexByte(tok, '\\') < 0 {
				s = string(tok[1 : len(tok)-1])
			} else if err := json.Unmarshal(tok, &s); err != nil {
				return nil, fmt.Errorf("%w: a string: %w", ErrNotJSON, err)
			}
			red := r.Redact([]byte(s))
			f := top()
			isKey := f != nil && f.object && f.expectKey
			if isKey {
				f.expectKey = false
			}
			if len(red) == len(s) && string(red) == s {
				out = append(out, tok...)
				continue
			}
			key := string(red)
			if isKey {
				if f.redacted == nil {
					f.redacted = map[string]bool{}
				}
				for n := 2; f.redacted[key]; n++ {
					key = fmt.Sprintf("%s %d", red, n)
				}
				f.redacted[key] = true
			}
			out = appendJSONString(out, key)
		case c == '-' || c >= '0' && c <= '9':
			end := i + 1
			for end < len(b) && strings.IndexByte("0123456789+-.eE", b[end]) >= 0 {
				end++
			}
			if p.set[string(b[i:end])] {
				out = append(out, '"')
				out = append(out, Redacted...)
				out = append(out, '"')
			} else {
				out = append(out, b[i:end]...)
			}
			i = end
		default:
			switch c {
			case '{', '[':
				stack = append(stack, &frame{object: c == '{', expectKey: c == '{'})
			case '}', ']':
				stack = stack[:len(stack)-1]
			case ',':
				if f := top(); f != nil && f.object {
					f.expectKey = true
				}
			}
			out = append(out, c)
			i++
		}
	}
	return out, nil
}

// RedactLine redacts one log line: a line that is a JSON object or array is
// redacted by value (RedactJSON), so that a job's structured log lines stay
// JSON; any other line as text (Redact).
func (r *Redactor) RedactLine(b []byte) []byte {
	if r.Empty() {
		return b
	}
	// Most lines hold no secret: one search, and no JSON parse, decides them. (A secret only
	// spelled with \u escapes in a JSON line is then missed, as in any text line.)
	if findSpans(b, r.pats.Load().list) == nil {
		return b
	}
	if t := bytes.TrimLeft(b, " \t"); len(t) > 0 && (t[0] == '{' || t[0] == '[') {
		if out, err := r.RedactJSON(b); err == nil {
			return out
		}
	}
	return r.Redact(b)
}

// stringEnd returns the index just past the JSON string that starts at b[i]
// (its opening quote); b is valid JSON.
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(b)
}

// appendJSONString appends s as a JSON string, without the HTML escaping of
// json.Marshal: a redacted string keeps its < and & as the job wrote them.
func appendJSONString(dst []byte, s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return append(dst, bytes.TrimRight(buf.Bytes(), "\n")...)
}
