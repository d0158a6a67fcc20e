package secrets

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
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
		{`{"user":"admin","enabled":"true"}`, false, "the leaf enabled is a string that reads as a JSON keyword"},
		{`"null"`, false, "the value is a string that reads as a JSON keyword"},
		{`{"user":"admin","enabled":true}`, true, ""},
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
		if strings.Contains(c.value, `"true"`) && strings.Contains(err.Error(), `"true"`) {
			t.Errorf("CheckValue(%s) = %v: the error quotes the value", c.value, err)
		}
	}
}

// TestRedactJSON is the attack of issue 22: a secret {"user":"admin","pin":48291736} and a
// function returning cred["pin"] got {"pin":[REDACTED]}, which is not JSON, and the job hung.
// Results are redacted by value: the output is always valid JSON, and the numbers, booleans
// and nulls the job produced are never touched, except a number that is a secret as a whole.
func TestRedactJSON(t *testing.T) {
	cases := []struct {
		name    string
		secrets []string
		in      string
		want    string
	}{
		{"a secret number returned", []string{`{"user":"admin","pin":48291736}`}, `{"pin":48291736}`, `{"pin":"[REDACTED]"}`},
		{"a secret number alone", []string{`{"user":"admin","pin":48291736}`}, `48291736`, `"[REDACTED]"`},
		{"the secret object returned", []string{`{"user":"admin","pin":48291736}`}, `{"cred":{"user":"admin","pin":48291736}}`,
			`{"cred":{"user":"[REDACTED]","pin":"[REDACTED]"}}`},
		{"a number holding a secret's digits is kept", []string{`{"host":"db.internal","port":5432}`}, `{"n":154321,"m":5432.5,"k":-5432}`,
			`{"n":154321,"m":5432.5,"k":-5432}`},
		{"a secret number in a string", []string{`{"host":"db.internal","port":5432}`}, `{"s":"port 5432 of 154321"}`,
			`{"s":"port [REDACTED] of 1[REDACTED]1"}`},
		{"keyword leaves redact nothing", []string{`{"enabled":"true","next":"null","token":"tok-123456"}`},
			`{"ok":true,"next":null,"f":false,"s":"true story"}`, `{"ok":true,"next":null,"f":false,"s":"true story"}`},
		{"a string secret in a value", []string{`"sk-live-1234"`}, `{"a":"key=sk-live-1234!","b":[1,true,null]}`,
			`{"a":"key=[REDACTED]!","b":[1,true,null]}`},
		{"a string secret that is a number returned", []string{`{"pin":"77665544"}`}, `{"pin":77665544}`, `{"pin":"[REDACTED]"}`},
		{"keys holding a secret", []string{`"sk-live-1234"`, `"AKIA-XYZ-987"`},
			`{"sk-live-1234":1,"o":{"sk-live-1234":2},"AKIA-XYZ-987":3,"x-AKIA-XYZ-987":4}`,
			`{"[REDACTED]":1,"o":{"[REDACTED]":2},"[REDACTED] 2":3,"x-[REDACTED]":4}`},
		{"an escaped spelling", []string{`"sk-live-1234"`}, `{"a":"sk-\u006cive-1234"}`, `{"a":"[REDACTED]"}`},
		{"JSON inside a string", []string{`{"user":"admin","pin":48291736}`}, `{"s":"{\"pin\": 48291736}"}`, `{"s":"{\"pin\": [REDACTED]}"}`},
		{"a newline escape before a secret's letters", []string{`"nabcdef"`}, `{"s":"x\nabcdef"}`, `{"s":"x\nabcdef"}`},
		{"html characters kept", []string{`"sk-live-1234"`}, `{"s":"<a> sk-live-1234 & b"}`, `{"s":"<a> [REDACTED] & b"}`},
		{"spacing kept where nothing changes", []string{`"sk-live-1234"`}, `{"a": 1, "b": "sk-live-1234"}`, `{"a": 1, "b": "[REDACTED]"}`},
		{"nothing to redact", []string{`"sk-live-1234"`}, `{"a":"b","n":12.5e3}`, `{"a":"b","n":12.5e3}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := NewRedactor()
			for _, s := range c.secrets {
				r.Add(json.RawMessage(s))
			}
			got, err := r.RedactJSON([]byte(c.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Errorf("RedactJSON(%s) = %s, want %s", c.in, got, c.want)
			}
			if !json.Valid(got) {
				t.Errorf("RedactJSON(%s) = %s: not valid JSON", c.in, got)
			}
		})
	}
	if _, err := NewRedactor().RedactJSON([]byte(`{"pin":[REDACTED]}`)); err == nil {
		t.Error("RedactJSON took text that is not JSON")
	}
}

// TestRedactLineKeepsJSON: a log line keeps its JSON valid. A match starting inside a \n
// escape used to break the string; a JSON log line with a secret number became invalid.
func TestRedactLineKeepsJSON(t *testing.T) {
	r := NewRedactor()
	r.Add(json.RawMessage(`"nabcdef"`), json.RawMessage(`"9xyzw"`), json.RawMessage(`{"user":"admin","pin":48291736}`))
	cases := []struct{ in, want string }{
		{`plain "x\nabcdef" text`, `plain "x[REDACTED]" text`},                                // text: the match takes its escape
		{`not json {"s":"caf\u00e9xyzw"`, `not json {"s":"caf[REDACTED]"`},                    // inside \uXXXX
		{`{"pin": 48291736, "user": "admin"}`, `{"pin": "[REDACTED]", "user": "[REDACTED]"}`}, // a JSON line by value
		{`{"s":"x\nabcdef"}`, `{"s":"x\nabcdef"}`},                                            // the value holds no secret
		{`pin 48291736 and 148291736`, `pin [REDACTED] and 1[REDACTED]`},                      // text: digits as a string
	}
	for _, c := range cases {
		if got := string(r.RedactLine([]byte(c.in))); got != c.want {
			t.Errorf("RedactLine(%s) = %s, want %s", c.in, got, c.want)
		}
	}
	// A JSON string token in a text line stays a JSON string whatever the match.
	for _, in := range []string{`"a\nabcdef"`, `"\\nabcdef"`, `"\u00e9xyzw"`, `"\\\u00e9xyzw"`, `"abc\"9xyzw"`} {
		got := r.Redact([]byte(in))
		var s string
		if err := json.Unmarshal(got, &s); err != nil {
			t.Errorf("Redact(%s) = %s: no longer a JSON string: %v", in, got, err)
		}
	}
}

// TestRedactCut is the other half of issue 22's truncation attack: the 16 KiB line cap left
// "…ntoken-9" (8 of 11 characters) in the log and the 4 KiB stderr tail began "oken-9f3a…".
// A cut end never shows a part of a secret.
func TestRedactCut(t *testing.T) {
	r := NewRedactor()
	r.Add(json.RawMessage(`"apintoken-9f3a"`))
	cases := []struct {
		name             string
		in               string
		cutStart, cutEnd bool
		want             string
	}{
		{"cut end inside a secret", "the key is apintoken-9", false, true, "the key is "},
		{"cut start inside a secret", "oken-9f3a then the rest", true, false, " then the rest"},
		{"whole secrets and a cut end", "apintoken-9f3a and apint", false, true, "[REDACTED] and "},
		{"a whole secret at a cut start", "apintoken-9f3a!", true, false, "[REDACTED]!"},
		{"no part of a secret at the end", "the key is hidden", false, true, "the key is hidden"},
		{"not cut: kept", "the key is apintoken-9", false, false, "the key is apintoken-9"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := string(r.RedactCut([]byte(c.in), c.cutStart, c.cutEnd)); got != c.want {
				t.Errorf("RedactCut(%q, %v, %v) = %q, want %q", c.in, c.cutStart, c.cutEnd, got, c.want)
			}
		})
	}
}

// TestRedactNeverBreaksJSON: whatever a job prints around its secrets (escapes, quotes,
// digits), redacting a JSON text as a text line, as a line, or by value leaves valid JSON.
func TestRedactNeverBreaksJSON(t *testing.T) {
	r := NewRedactor()
	r.Add(json.RawMessage(`{"user":"nuser\\x","pin":48291736,"key":"u00e9ab"}`), json.RawMessage(`"\"quo\\te"`), json.RawMessage(`"1xyzw"`))
	// Pieces that make escapes next to secrets: "\n"+"user\\x" prints \nuser\\x, which holds
	// the secret nuser\x from the n of the escape; "\x01"+"xyzw" prints \u0001xyzw.
	parts := []string{"n", "u", "\\", "\"", "00e9", "ab", "48291736", "nuser\\x", "user\\x", "u00e9ab", "\"quo\\te", "x", "\n",
		"é", " ", "1", "\x01", "xyzw"}
	rng := rand.New(rand.NewPCG(22, 22))
	for range 20000 {
		var sb strings.Builder
		for range rng.IntN(8) + 1 {
			sb.WriteString(parts[rng.IntN(len(parts))])
		}
		s := sb.String()
		enc, _ := json.Marshal(map[string]any{"m": s, s: 1, "n": 48291736})
		for name, out := range map[string][]byte{"Redact": r.Redact(enc), "RedactLine": r.RedactLine(enc)} {
			var v any
			if name == "Redact" {
				// As text, a secret number becomes a bare [REDACTED]: only its strings must hold.
				out = []byte(strings.ReplaceAll(string(out), ":"+Redacted, `:"`+Redacted+`"`))
			}
			if err := json.Unmarshal(out, &v); err != nil {
				t.Fatalf("%s(%s) = %s: not JSON: %v", name, enc, out, err)
			}
		}
		byValue, err := r.RedactJSON(enc)
		if err != nil || !json.Valid(byValue) {
			t.Fatalf("RedactJSON(%s) = %s, %v", enc, byValue, err)
		}
	}
}

// TestRedactorBase64Embedded is issue 37's item 2: a sealed key the proxy wrote into a Basic
// credential is base64("user:" + key), whose characters depend on the prefix; a credential
// echoed into a job's result, record or log must still be redacted, whatever the prefix's
// length, and in either alphabet.
func TestRedactorBase64Embedded(t *testing.T) {
	const key = "sk-real-0123456789abcdef"
	r := NewRedactor()
	r.Add(json.RawMessage(`"` + key + `"`))
	for _, prefix := range []string{"", "u", "us", "x-access-token:", "user:", "git:", `{"key":"`} {
		for _, suffix := range []string{"", "!", "@@", `"}`} {
			for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding} {
				b64 := enc.EncodeToString([]byte(prefix + key + suffix))
				line := "auth: Basic " + b64 + " end"
				got := r.RedactString(line)
				if !strings.Contains(got, Redacted) || !strings.HasPrefix(got, "auth: Basic ") || !strings.HasSuffix(got, " end") {
					t.Errorf("prefix %q suffix %q: %q became %q; want the credential redacted", prefix, suffix, line, got)
					continue
				}
				// What is left of the credential around [REDACTED] are the few characters that
				// also carry the prefix's or the suffix's bits: never enough to rebuild the key.
				rest := strings.TrimSuffix(strings.TrimPrefix(got, "auth: Basic "), " end")
				left := len(rest) - len(Redacted)
				if max := (len(prefix)*4+2)/3 + (len(suffix)*4+2)/3 + 4; left > max {
					t.Errorf("prefix %q suffix %q: %d characters of the credential left (%q); want at most %d", prefix, suffix, left, rest, max)
				}
			}
		}
	}
	// In a JSON result, as AGENT_RESULTS and the job record store it.
	cred := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + key))
	out, err := r.RedactJSON([]byte(`{"echo":"Basic ` + cred + `"}`))
	if err != nil || strings.Contains(string(out), cred[len(cred)-20:]) || !strings.Contains(string(out), Redacted) {
		t.Errorf("RedactJSON: %s, %v; want the credential redacted", out, err)
	}
	// A short value's shifted base64 would be a handful of characters: it is not looked for,
	// so ordinary text stays as it is.
	short := NewRedactor()
	short.Add(json.RawMessage(`"abcd"`))
	for _, text := range []string{"YWJjZA", "the quick brown fox", base64.StdEncoding.EncodeToString([]byte("x:abcd"))} {
		if got := short.RedactString(text); got != text && text != "YWJjZA" {
			t.Errorf("short value: %q became %q", text, got)
		}
	}
}
