package secrets

import (
	"encoding/base64"
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

// TestRedactorLeavesAndBase64 is the red team's row 5: a number inside an
// object printed on its own, and a secret printed base64-encoded, both used
// to get through.
func TestRedactorLeavesAndBase64(t *testing.T) {
	const cred = `{"user":"admin","pin":48291736,"on":true}`
	b64 := func(enc *base64.Encoding, s string) string { return enc.EncodeToString([]byte(s)) }
	cases := []struct {
		name, secret, in, want string
	}{
		{"number leaf", cred, "pin=48291736", "pin=[REDACTED]"},
		{"number leaf in json", cred, `{"pin": 48291736}`, `{"pin": [REDACTED]}`},
		{"string leaf", cred, "user admin", "user [REDACTED]"},
		{"boolean leaf kept", cred, "on=true", "on=true"},
		{"top-level number", `48291736`, "n 48291736", "n [REDACTED]"},
		{"number in array", `[12345, "abcd"]`, "12345 abcd", "[REDACTED] [REDACTED]"},
		{"float leaf", `{"rate":1234.5678}`, "r=1234.5678", "r=[REDACTED]"},
		{"std base64 of string", `"sk-live-1234"`, b64(base64.StdEncoding, "sk-live-1234"), "[REDACTED]"},
		{"url base64 of string", `"sk~live?>>1234"`, b64(base64.URLEncoding, "sk~live?>>1234"), "[REDACTED]"},
		{"unpadded base64", `"sk-live-12345"`, b64(base64.RawStdEncoding, "sk-live-12345") + ".", "[REDACTED]."},
		{"base64 of raw json value", cred, "Basic " + b64(base64.StdEncoding, cred), "Basic [REDACTED]"},
		{"url base64 of raw json value", cred, b64(base64.URLEncoding, cred), "[REDACTED]"},
		{"base64 of quoted string", `"sk-live-1234"`, b64(base64.StdEncoding, `"sk-live-1234"`), "[REDACTED]"},
		{"base64 of string leaf", cred, b64(base64.StdEncoding, "admin"), "[REDACTED]"},
		{"base64 of json as stored", `{ "a": "long-value" }`, b64(base64.StdEncoding, `{ "a": "long-value" }`), "[REDACTED]"},
		{"python-spaced json", cred, `got {"user": "admin", "pin": 48291736, "on": true}`, "got [REDACTED]"},
		{"base64 of python-spaced json", `{"a":"x, y: z","n":[1234,5678]}`,
			b64(base64.StdEncoding, `{"a": "x, y: z", "n": [1234, 5678]}`), "[REDACTED]"},
		{"unrelated text kept", cred, "nothing to see", "nothing to see"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := NewRedactor()
			r.Add(json.RawMessage(c.secret))
			got := r.RedactString(c.in)
			// Padding after a redacted unpadded form may remain; it holds no secret.
			got = strings.TrimRight(strings.ReplaceAll(got, Redacted+"=", Redacted), "=")
			if got != c.want {
				t.Errorf("RedactString(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}

func TestCheckValue(t *testing.T) {
	cases := []struct {
		value string
		ok    bool
		want  string // in the error
	}{
		{`"long-enough"`, true, ""},
		{`"abcd"`, true, ""},
		{`12345`, true, ""},
		{`{"user":"admin","pin":48291736,"on":true,"x":null}`, true, ""},
		{`{}`, true, ""},
		{`"abc"`, false, "the value is a string of 3 characters, shorter than 4"},
		{`""`, false, "string of 0 characters"},
		{`42`, false, "the value is a number of 2 characters"},
		{`true`, false, "a bare boolean is not a secret"},
		{`null`, false, "a bare null is not a secret"},
		{`{"user":"admin","pin":123}`, false, "the leaf pin is a number of 3 characters"},
		{`{"a":{"b":["long-one","xy"]}}`, false, "the leaf a.b[1] is a string of 2 characters"},
		{`not json`, false, "not valid JSON"},
	}
	for _, c := range cases {
		err := CheckValue(json.RawMessage(c.value))
		if c.ok {
			if err != nil {
				t.Errorf("CheckValue(%s) = %v, want nil", c.value, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckValue(%s) = %v, want an error with %q", c.value, err, c.want)
			continue
		}
		if !strings.Contains(err.Error(), "not valid JSON") && !strings.Contains(err.Error(), "a bare") &&
			!strings.Contains(err.Error(), "cannot be redacted") {
			t.Errorf("CheckValue(%s) = %v: does not say why", c.value, err)
		}
	}
}
