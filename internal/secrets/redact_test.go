package secrets

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
)

func TestRedactor(t *testing.T) {
	r := NewRedactor()
	r.Add(
		json.RawMessage(`"sk-live-1234"`),
		json.RawMessage(`"pa\"ss\\wörd\n😀"`),
		json.RawMessage(`{"user":"bob","key":"AKIA-XYZ-987"}`),
		json.RawMessage(`"abc"`), // too short: ignored
		json.RawMessage(`123456789`),
	)
	tricky := "pa\"ss\\wörd\n😀"
	jsMin, _ := json.Marshal(tricky) // Go escapes like JS here: no <>&
	cases := []struct{ name, in, want string }{
		{"raw", "token=sk-live-1234 ok", "token=[REDACTED] ok"},
		{"twice", "sk-live-1234sk-live-1234", "[REDACTED][REDACTED]"},
		{"multiple", "a sk-live-1234 b AKIA-XYZ-987 c", "a [REDACTED] b [REDACTED] c"},
		{"raw tricky", "x" + tricky + "y", "x[REDACTED]y"},
		{"json tricky", `{"v":` + string(jsMin) + `}`, `{"v":"[REDACTED]"}`},
		{"python ascii", `{"v": "pa\"ss\\w\u00f6rd\n\ud83d\ude00"}`, `{"v": "[REDACTED]"}`},
		{"double escaped", `"{\"v\": \"pa\\\"ss\\\\wörd\\n😀\"}"`, `"{\"v\": \"[REDACTED]\"}"`},
		{"object whole", `got {"user":"bob","key":"AKIA-XYZ-987"}!`, `got [REDACTED]!`},
		{"object escaped", `"{\"user\":\"bob\",\"key\":\"AKIA-XYZ-987\"}"`, `"[REDACTED]"`},
		{"short leaf kept", "bob is here", "bob is here"},
		{"number", "n=123456789;", "n=[REDACTED];"},
		{"short value kept", "abc", "abc"},
		{"nothing", "clean text", "clean text"},
		{"empty", "", ""},
	}
	for _, c := range cases {
		if got := r.RedactString(c.in); got != c.want {
			t.Errorf("%s: RedactString(%q) = %q, want %q", c.name, c.in, got, c.want)
		}
		if got := string(r.Redact([]byte(c.in))); got != c.want {
			t.Errorf("%s: Redact(%q) = %q, want %q", c.name, c.in, got, c.want)
		}
	}
}

func TestRedactorOverlap(t *testing.T) {
	r := NewRedactor()
	r.Add(json.RawMessage(`"abcdef"`), json.RawMessage(`"defghi"`), json.RawMessage(`"secret"`), json.RawMessage(`"secret-long"`))
	cases := []struct{ in, want string }{
		{"xabcdefghiy", "x[REDACTED]y"},             // two secrets overlap
		{"abcdefabcdef", "[REDACTED][REDACTED]"},    // adjacent, not overlapping
		{"a secret-long b", "a [REDACTED] b"},       // one secret inside another
		{"a secret b", "a [REDACTED] b"},            // the shorter alone
		{"abcdefghisecret", "[REDACTED][REDACTED]"}, // run then adjacent
	}
	for _, c := range cases {
		if got := r.RedactString(c.in); got != c.want {
			t.Errorf("RedactString(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	self := NewRedactor()
	self.Add(json.RawMessage(`"aaaa"`))
	if got := self.RedactString("xaaaaaay"); got != "x[REDACTED]y" {
		t.Errorf("self-overlap: %q", got)
	}
}

func TestRedactorEmptyAndMerge(t *testing.T) {
	var nilR *Redactor
	in := []byte("some sk-live-1234 text")
	if got := nilR.Redact(in); &got[0] != &in[0] {
		t.Error("nil Redactor copied its input")
	}
	if !nilR.Empty() || nilR.RedactString("x") != "x" {
		t.Error("nil Redactor is not empty")
	}
	empty := NewRedactor()
	if got := empty.Redact(in); &got[0] != &in[0] || !empty.Empty() {
		t.Error("empty Redactor copied its input")
	}
	var zero Redactor
	if zero.RedactString("abc") != "abc" {
		t.Error("zero Redactor changed text")
	}

	a, b := NewRedactor(), NewRedactor()
	a.Add(json.RawMessage(`"sk-live-1234"`))
	b.Add(json.RawMessage(`"other-secret"`))
	a.Merge(b)
	a.Merge(nil)
	a.Merge(a)
	if got := a.RedactString("sk-live-1234 other-secret"); got != "[REDACTED] [REDACTED]" {
		t.Errorf("merged: %q", got)
	}
	if b.RedactString("sk-live-1234") != "sk-live-1234" {
		t.Error("Merge changed its argument")
	}
	// Not a match: the input slice comes back as it is.
	if got := a.Redact([]byte("clean")); string(got) != "clean" {
		t.Errorf("clean: %q", got)
	}
}

func TestRedactorConcurrent(t *testing.T) {
	r := NewRedactor()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			r.Add(json.RawMessage(fmt.Sprintf(`"secret-%04d"`, i)))
		}()
		go func() {
			defer wg.Done()
			for range 100 {
				_ = r.RedactString("secret-0001 secret-0002")
			}
		}()
	}
	wg.Wait()
	var sb strings.Builder
	for i := range 8 {
		fmt.Fprintf(&sb, "secret-%04d ", i)
	}
	if got := r.RedactString(sb.String()); strings.Contains(got, "secret-") {
		t.Errorf("after concurrent Adds: %q", got)
	}
}
