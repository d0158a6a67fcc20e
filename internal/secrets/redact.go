package secrets

import (
	"bytes"
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
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
