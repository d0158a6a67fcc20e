package secrets

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
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
	pats atomic.Pointer[patterns] // immutable snapshot, replaced on every change
}

// patterns is one snapshot of a Redactor's patterns: as a list to search text
// for, and as a set to tell a JSON number that is a secret as a whole.
type patterns struct {
	list [][]byte
	set  map[string]bool
}

// isKeyword reports whether s is a JSON keyword. A secret leaf "true" (a
// string) is not a pattern: every JSON output holds true, false or null, and
// redacting them would break the output while hiding nothing of the secret
// worth hiding (CheckValue refuses such leaves).
func isKeyword(s string) bool { return s == "true" || s == "false" || s == "null" }

// NewRedactor returns an empty Redactor.
func NewRedactor() *Redactor { return &Redactor{} }

// Add registers secret values (JSON). For a JSON string the pattern is the
// string itself; for any other value it is the value's compact JSON text plus
// every scalar leaf found in it at any depth: strings, and numbers as written
// (a PIN inside an object prints as its digits, so it must be a pattern of
// its own). Booleans and null are not patterns: a bit of information cannot
// be hidden, and redacting "true" would shred every JSON output; for the same
// reason neither is a string leaf that reads as one ("true", "null"). Every string
// pattern is also registered in its JSON-escaped forms (as written by
// JavaScript's JSON.stringify, Go's encoding/json, and Python's json.dumps
// with its default ensure_ascii, plus a second level of escaping), so that a
// secret holding quotes, backslashes, control characters or non-ASCII text is
// also found inside JSON output; and the base64 of the whole value (its JSON
// text, and a string's text) and of every string leaf, in the standard and
// URL alphabets, because Basic auth headers and tokens are printed that way,
// also where the value is embedded in a longer encoded text ("user:value" of
// a Basic credential; see appendBase64).
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
	if len(s) < MinRedactLen || isKeyword(s) {
		return dst
	}
	minimal := escapeJSON(s, false)
	dst = append(dst, s, minimal, goEscape(s), escapeJSON(s, true), escapeJSON(minimal, false))
	return appendBase64(dst, s)
}

// appendBase64 adds s in base64, standard and URL alphabets. The unpadded
// form is registered: it is a prefix of the padded one, so both are found.
//
// It also adds the base64 of s embedded at any offset of a longer text, as in
// a Basic credential base64("user:" + s) (what the egress proxy writes for a
// sealed key) or a JSON document holding s. Base64 maps each 3 bytes to 4
// characters, so the characters of s's part of the encoding depend only on s
// and on where s starts modulo 3: the encoding of (anything + s + anything)
// holds, for one of the 3 alignments, the encoding of s at that alignment less
// the first and last characters, which also carry bits of the neighbours. Those
// 3 cores (per alphabet) are the patterns, whatever the prefix and suffix are.
// What is left around [REDACTED] is the neighbours' characters and at most a
// character at each end that mixes a few bits of s with theirs. A core shorter
// than minBase64Core is not registered (see there).
func appendBase64(dst []string, s string) []string {
	if len(s) < MinRedactLen {
		return dst
	}
	b := []byte(s)
	dst = append(dst, base64.RawStdEncoding.EncodeToString(b), base64.RawURLEncoding.EncodeToString(b))
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		dst = append(dst, base64Cores(enc, b)...)
	}
	return dst
}

// minBase64Core is the shortest base64 core (base64Cores) looked for: 8
// characters, 48 bits of the value, so that the core of a short value does
// not match ordinary text (a 4-byte value has cores of 3 to 5 characters).
// A value of 7 bytes or more has all 3 cores this long.
const minBase64Core = 8

// base64Cores returns the characters of enc's encoding of v that depend on v
// alone when v starts 0, 1 or 2 bytes into the encoded text (every start
// modulo 3): the encoding of any text that holds v holds one of them. Cores
// shorter than 8 characters are left out: they would match unrelated text.
// enc must be unpadded (RawStdEncoding, RawURLEncoding). The egress proxy
// scrubs the same forms (its own copy: egress does not import this package)
// from what a sealed host sends back.
func base64Cores(enc *base64.Encoding, v []byte) []string {
	var out []string
	for k := range 3 {
		buf := make([]byte, k+len(v)+3)
		copy(buf[k:], v)
		text := enc.EncodeToString(buf)
		// Character j holds bits [6j, 6j+6) of the text; v holds bits [8k, 8(k+len(v))).
		first, last := (8*k+5)/6, 8*(k+len(v))/6
		if last-first >= minBase64Core {
			out = append(out, text[first:last])
		}
	}
	return out
}

// Merge adds every pattern of o to r.
func (r *Redactor) Merge(o *Redactor) {
	if o == nil || o == r {
		return
	}
	p := o.pats.Load()
	if p == nil || len(p.list) == 0 {
		return
	}
	add := make([]string, len(p.list))
	for i, b := range p.list {
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
	next := &patterns{set: map[string]bool{}}
	if old := r.pats.Load(); old != nil {
		next.list = slices.Clone(old.list)
		for _, b := range old.list {
			next.set[string(b)] = true
		}
	}
	for _, s := range add {
		if len(s) < MinRedactLen || isKeyword(s) || next.set[s] {
			continue
		}
		next.set[s] = true
		next.list = append(next.list, []byte(s))
	}
	r.pats.Store(next)
}

// Empty reports whether r has no pattern.
func (r *Redactor) Empty() bool {
	if r == nil {
		return true
	}
	p := r.pats.Load()
	return p == nil || len(p.list) == 0
}

// Redact returns b with every occurrence of every pattern replaced by
// "[REDACTED]"; overlapping occurrences (of one secret or of several) are
// replaced as one run. When nothing matches, b itself is returned; otherwise
// a new slice, and b is not modified.
//
// A match that begins or ends inside a JSON escape sequence (\n, \", \u00e9)
// takes the whole sequence with it: a log line that is JSON stays JSON, since
// a replacement never leaves half an escape behind.
func (r *Redactor) Redact(b []byte) []byte {
	return r.RedactCut(b, false, false)
}

// RedactCut is Redact for text cut out of a longer one: cutStart and cutEnd
// say which of its ends were cut. A secret that the cut split leaves a part of
// itself at that end, which no whole pattern matches; such a part (the longest
// end of the text that could begin, or end, a pattern) is dropped, so that a
// truncated log line or output tail never shows the first or last characters
// of a secret. The text is at most a few characters shorter than it would be.
func (r *Redactor) RedactCut(b []byte, cutStart, cutEnd bool) []byte {
	if r == nil || len(b) == 0 {
		return b
	}
	p := r.pats.Load()
	if p == nil || len(p.list) == 0 {
		return b
	}
	sp := findSpans(b, p.list)
	lo, hi := 0, len(b)
	if cutEnd {
		from := 0
		if len(sp) > 0 {
			from = sp[len(sp)-1].end
		}
		for _, pat := range p.list {
			hi = min(hi, partialAtEnd(b, pat, from))
		}
		if hi < len(b) {
			if s, _, ok := escapeAt(b, hi); ok {
				hi = s
			}
		}
	}
	if cutStart {
		until := hi
		if len(sp) > 0 {
			until = min(until, sp[0].start)
		}
		for _, pat := range p.list {
			lo = max(lo, partialAtStart(b, pat, until))
		}
		if lo > 0 {
			if _, e, ok := escapeAt(b, lo-1); ok {
				lo = min(e, hi)
			}
		}
	}
	if len(sp) == 0 && lo == 0 && hi == len(b) {
		return b
	}
	out := make([]byte, 0, hi-lo)
	last := lo // end of the text already copied or redacted
	for _, s := range sp {
		start, end := max(s.start, last), min(s.end, hi)
		if start >= end {
			continue
		}
		out = append(out, b[last:start]...)
		out = append(out, Redacted...)
		last = end
	}
	return append(out, b[last:hi]...)
}

type span struct{ start, end int }

// findSpans returns where the patterns occur in b, each widened to whole JSON
// escape sequences, sorted and merged where they overlap.
func findSpans(b []byte, pats [][]byte) []span {
	var spans []span
	for _, pat := range pats {
		// Step one byte past each match start, not past its end, so that
		// overlapping occurrences are all covered.
		for i := 0; i+len(pat) <= len(b); {
			j := bytes.Index(b[i:], pat)
			if j < 0 {
				break
			}
			s := span{i + j, i + j + len(pat)}
			if es, _, ok := escapeAt(b, s.start); ok {
				s.start = es
			}
			if _, ee, ok := escapeAt(b, s.end-1); ok {
				s.end = max(s.end, ee)
			}
			spans = append(spans, s)
			i += j + 1
		}
	}
	if len(spans) == 0 {
		return nil
	}
	slices.SortFunc(spans, func(a, c span) int { return a.start - c.start })
	merged := spans[:1]
	for _, s := range spans[1:] {
		if last := &merged[len(merged)-1]; s.start < last.end {
			last.end = max(last.end, s.end)
			continue
		}
		merged = append(merged, s)
	}
	return merged
}

// escapeAt reports the JSON escape sequence (a backslash and one character, or
// \uXXXX) that b[p] belongs to, if any. Whether a backslash starts an escape
// depends on how many backslashes precede it, which is why the run before it
// is counted.
func escapeAt(b []byte, p int) (start, end int, ok bool) {
	if p < 0 || p >= len(b) {
		return 0, 0, false
	}
	for j := p; j >= 0 && j >= p-5; j-- {
		if b[j] != '\\' {
			continue
		}
		n := 0
		for k := j - 1; k >= 0 && b[k] == '\\'; k-- {
			n++
		}
		if n%2 == 1 {
			// b[j] is the escaped character of the escape just before it.
			return j - 1, j + 1, p <= j
		}
		end = j + 2
		if j+1 < len(b) && b[j+1] == 'u' {
			end = j + 6
		}
		end = min(end, len(b))
		return j, end, p < end
	}
	return 0, 0, false
}

// partialAtEnd returns where the longest end of b that is a proper prefix of
// pat begins, looking no earlier than from; len(b) when there is none.
func partialAtEnd(b, pat []byte, from int) int {
	for i := max(from, len(b)-len(pat)+1, 0); i < len(b); i++ {
		k := bytes.IndexByte(b[i:], pat[0])
		if k < 0 {
			break
		}
		i += k
		if bytes.HasPrefix(pat, b[i:]) {
			return i
		}
	}
	return len(b)
}

// partialAtStart returns the length of the longest start of b, at most until
// bytes, that is a proper suffix of pat; 0 when there is none.
func partialAtStart(b, pat []byte, until int) int {
	for k := min(len(pat)-1, until, len(b)); k > 0; k-- {
		if b[k-1] == pat[len(pat)-1] && bytes.HasSuffix(pat, b[:k]) {
			return k
		}
	}
	return 0
}

// RedactString is Redact for a string.
func (r *Redactor) RedactString(s string) string {
	if r.Empty() || s == "" {
		return s
	}
	out := r.Redact([]byte(s))
	return string(out)
}

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
