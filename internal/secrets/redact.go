package secrets

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf16"
	"unicode/utf8"
)

// Redacted replaces every secret found by a Redactor.
const Redacted = "[REDACTED]"

// MinRedactLen is the shortest text a Redactor looks for. Shorter secret
// strings are not redacted: they would shred unrelated output ("true", ids,
// small numbers) while a value that short is guessable anyway.
const MinRedactLen = 4

// Redactor replaces secret values in text captured from a job. It is safe
// for concurrent use; the zero value and a nil *Redactor redact nothing.
//
// Redact works on one buffer at a time: a secret split across two calls (two
// chunks of a stream) is not found, so callers redact whole captured outputs,
// or at least whole lines.
type Redactor struct {
	mu   sync.Mutex               // serialises writers; readers use pats only
	pats atomic.Pointer[[][]byte] // immutable snapshot, replaced on every change
}

// NewRedactor returns an empty Redactor.
func NewRedactor() *Redactor { return &Redactor{} }

// Add registers secret values (JSON). For a JSON string the pattern is the
// string itself; for any other value it is the value's compact JSON text plus
// every scalar leaf found in it at any depth: strings, and numbers as written
// (a PIN inside an object prints as its digits, so it must be a pattern of
// its own). Booleans and null are not patterns: a bit of information cannot
// be hidden, and redacting "true" would shred every JSON output. Every string
// pattern is also registered in its JSON-escaped forms (as written by
// JavaScript's JSON.stringify, Go's encoding/json, and Python's json.dumps
// with its default ensure_ascii, plus a second level of escaping), so that a
// secret holding quotes, backslashes, control characters or non-ASCII text is
// also found inside JSON output; and the base64 of the whole value (its JSON
// text, and a string's text) and of every string leaf, in the standard and
// URL alphabets, because Basic auth headers and tokens are printed that way.
// Patterns shorter than MinRedactLen bytes are skipped (Store.Set refuses such
// values). A value that is not valid JSON is taken as a literal string.
func (r *Redactor) Add(values ...json.RawMessage) {
	var add []string
	for _, raw := range values {
		add = appendForms(add, raw)
	}
	r.addPatterns(add)
}

func appendForms(dst []string, raw json.RawMessage) []string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return appendStringForms(dst, string(raw))
	}
	// The JSON text as sent (a file holding the secret, base64-encoded as a
	// whole, keeps its spacing) and compacted.
	dst = appendBase64(dst, string(bytes.TrimSpace(raw)))
	if s, ok := v.(string); ok {
		return appendStringForms(dst, s)
	}
	if c, err := compactJSON(raw); err == nil {
		dst = appendStringForms(dst, string(c))
		// Python's json.dumps separates with ", " and ": " by default: the
		// form a Python function prints or base64-encodes.
		dst = appendStringForms(dst, spaced(c))
	}
	leaves(v, func(leaf any) {
		switch x := leaf.(type) {
		case string:
			dst = appendStringForms(dst, x)
		case json.Number:
			dst = append(dst, x.String())
		}
	})
	return dst
}

// leaves calls f on every scalar of a decoded JSON value, at any depth.
func leaves(v any, f func(leaf any)) {
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			leaves(e, f)
		}
	case []any:
		for _, e := range x {
			leaves(e, f)
		}
	default:
		f(x)
	}
}

func appendStringForms(dst []string, s string) []string {
	if len(s) < MinRedactLen {
		return dst
	}
	minimal := escapeJSON(s, false)
	dst = append(dst, s, minimal, goEscape(s), escapeJSON(s, true), escapeJSON(minimal, false))
	return appendBase64(dst, s)
}

// appendBase64 adds s in base64, standard and URL alphabets. The unpadded
// form is registered: it is a prefix of the padded one, so both are found.
// Base64 of a secret embedded at an arbitrary offset of a longer text is not
// found (its characters depend on the neighbours); only whole values are.
func appendBase64(dst []string, s string) []string {
	if len(s) < MinRedactLen {
		return dst
	}
	b := []byte(s)
	return append(dst, base64.RawStdEncoding.EncodeToString(b), base64.RawURLEncoding.EncodeToString(b))
}

// Merge adds every pattern of o to r.
func (r *Redactor) Merge(o *Redactor) {
	if o == nil || o == r {
		return
	}
	p := o.pats.Load()
	if p == nil || len(*p) == 0 {
		return
	}
	add := make([]string, len(*p))
	for i, b := range *p {
		add[i] = string(b)
	}
	r.addPatterns(add)
}

func (r *Redactor) addPatterns(add []string) {
	if len(add) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	var next [][]byte
	if old := r.pats.Load(); old != nil {
		next = slices.Clone(*old)
		for _, b := range *old {
			seen[string(b)] = true
		}
	}
	for _, s := range add {
		if len(s) < MinRedactLen || seen[s] {
			continue
		}
		seen[s] = true
		next = append(next, []byte(s))
	}
	r.pats.Store(&next)
}

// Empty reports whether r has no pattern.
func (r *Redactor) Empty() bool {
	if r == nil {
		return true
	}
	p := r.pats.Load()
	return p == nil || len(*p) == 0
}

// Redact returns b with every occurrence of every pattern replaced by
// "[REDACTED]"; overlapping occurrences (of one secret or of several) are
// replaced as one run. When nothing matches, b itself is returned; otherwise
// a new slice, and b is not modified.
func (r *Redactor) Redact(b []byte) []byte {
	if r == nil {
		return b
	}
	p := r.pats.Load()
	if p == nil || len(*p) == 0 || len(b) == 0 {
		return b
	}
	type span struct{ start, end int }
	var spans []span
	for _, pat := range *p {
		// Step one byte past each match start, not past its end, so that
		// overlapping occurrences are all covered.
		for i := 0; i+len(pat) <= len(b); {
			j := bytes.Index(b[i:], pat)
			if j < 0 {
				break
			}
			spans = append(spans, span{i + j, i + j + len(pat)})
			i += j + 1
		}
	}
	if len(spans) == 0 {
		return b
	}
	slices.SortFunc(spans, func(a, c span) int { return a.start - c.start })
	out := make([]byte, 0, len(b))
	last := 0 // end of the text already copied or redacted
	for k := 0; k < len(spans); {
		start, end := spans[k].start, spans[k].end
		for k++; k < len(spans) && spans[k].start < end; k++ {
			end = max(end, spans[k].end)
		}
		out = append(out, b[last:start]...)
		out = append(out, Redacted...)
		last = end
	}
	return append(out, b[last:]...)
}

// RedactString is Redact for a string.
func (r *Redactor) RedactString(s string) string {
	if r.Empty() || s == "" {
		return s
	}
	out := r.Redact([]byte(s))
	return string(out)
}

// spaced is compact JSON with a space after every ',' and ':' outside
// strings, as Python's json.dumps writes it by default.
func spaced(compact []byte) string {
	var sb strings.Builder
	inStr, esc := false, false
	for _, c := range compact {
		sb.WriteByte(c)
		switch {
		case esc:
			esc = false
		case inStr && c == '\\':
			esc = true
		case c == '"':
			inStr = !inStr
		case !inStr && (c == ',' || c == ':'):
			sb.WriteByte(' ')
		}
	}
	return sb.String()
}

func compactJSON(raw []byte) ([]byte, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// goEscape is s as Go's encoding/json writes it inside quotes, which also
// escapes <, >, & and U+2028/U+2029.
func goEscape(s string) string {
	b, err := json.Marshal(s)
	if err != nil || len(b) < 2 {
		return s
	}
	return string(b[1 : len(b)-1])
}

// escapeJSON is s as JavaScript's JSON.stringify writes it inside quotes
// (asciiOnly false), or as Python's json.dumps does by default (asciiOnly
// true: every non-ASCII character as \uXXXX, UTF-16 surrogate pairs beyond
// the BMP).
func escapeJSON(s string, asciiOnly bool) string {
	var sb strings.Builder
	for i := 0; i < len(s); {
		c, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch c {
		case '"':
			sb.WriteString(`\"`)
		case '\\':
			sb.WriteString(`\\`)
		case '\b':
			sb.WriteString(`\b`)
		case '\f':
			sb.WriteString(`\f`)
		case '\n':
			sb.WriteString(`\n`)
		case '\r':
			sb.WriteString(`\r`)
		case '\t':
			sb.WriteString(`\t`)
		default:
			switch {
			case c < 0x20:
				fmt.Fprintf(&sb, `\u%04x`, c)
			case asciiOnly && c > 0x7e && c <= 0xffff:
				fmt.Fprintf(&sb, `\u%04x`, c)
			case asciiOnly && c > 0xffff:
				hi, lo := utf16.EncodeRune(c)
				fmt.Fprintf(&sb, `\u%04x\u%04x`, hi, lo)
			default:
				sb.WriteRune(c)
			}
		}
	}
	return sb.String()
}
