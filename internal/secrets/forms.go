package secrets

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// appendForms appends the forms in which output may carry raw, as Add describes them.
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
