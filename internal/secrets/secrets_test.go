package secrets

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/testkit/natstest"
)

func testKey(b byte) []byte { return bytes.Repeat([]byte{b}, KeySize) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func openStore(t *testing.T) (*Store, jetstream.JetStream) {
	t.Helper()
	_, js := natstest.Start(t)
	s, err := Open(ctxT(t), js, testKey(1), 1)
	if err != nil {
		t.Fatal(err)
	}
	return s, js
}

func TestRoundTripAndAtRest(t *testing.T) {
	ctx := ctxT(t)
	s, js := openStore(t)
	cases := map[string]string{
		"str":    `"s3cr3t-Str1ng"`,
		"obj":    `{"user":"alice","password":"pa55w0rd-XYZ","n":[1001,2002,3003],"on":true}`,
		"num":    `1234567890123456789012`,
		"a/b.c=": `"with \"quotes\" and é"`,
	}
	for name, v := range cases {
		if err := s.Set(ctx, name, json.RawMessage(v)); err != nil {
			t.Fatalf("Set %s: %v", name, err)
		}
	}
	for name, v := range cases {
		got, err := s.Get(ctx, name)
		if err != nil {
			t.Fatalf("Get %s: %v", name, err)
		}
		if string(got) != v {
			t.Errorf("Get %s = %s, want %s", name, got, v)
		}
	}

	// The raw bucket content holds no plaintext, in any encoding.
	kv, err := js.KeyValue(ctx, Bucket)
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range cases {
		e, err := kv.Get(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		raw := e.Value()
		for _, needle := range []string{v, "s3cr3t", "pa55w0rd", "alice", "1234567890", "quotes",
			base64.StdEncoding.EncodeToString([]byte(v))} {
			if bytes.Contains(raw, []byte(needle)) {
				t.Errorf("stored %s contains plaintext %q: %s", name, needle, raw)
			}
		}
		var env map[string]any
		if err := json.Unmarshal(raw, &env); err != nil {
			t.Fatalf("stored %s is not JSON: %v", name, err)
		}
		if env["v"] != float64(1) || env["kek_id"] != KeyID(testKey(1)) {
			t.Errorf("envelope header = %v", env)
		}
		for _, f := range []string{"wrapped_key", "nonce", "ciphertext"} {
			if _, ok := env[f].(string); !ok {
				t.Errorf("envelope lacks %s: %s", f, raw)
			}
		}
	}

	// Overwrite, list, delete.
	if err := s.Set(ctx, "str", json.RawMessage(`"new-value"`)); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(ctx, "str"); string(got) != `"new-value"` {
		t.Errorf("after overwrite Get = %s", got)
	}
	names, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a/b.c=", "num", "obj", "str"}; !reflect.DeepEqual(names, want) {
		t.Errorf("List = %v, want %v", names, want)
	}
	if err := s.Delete(ctx, "obj"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "obj"); !errors.Is(err, ErrNotFound) ||
		err.Error() != `secret "obj" not found: set it with host secrets set obj '<json>'` {
		t.Errorf("Get after Delete: %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "obj"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Delete: %v, want ErrNotFound", err)
	}
	names, _ = s.List(ctx)
	if want := []string{"a/b.c=", "num", "str"}; !reflect.DeepEqual(names, want) {
		t.Errorf("List after Delete = %v, want %v", names, want)
	}
}

func TestEmptyListAndBind(t *testing.T) {
	ctx := ctxT(t)
	_, js := natstest.Start(t)
	if _, err := Bind(ctx, js, testKey(1)); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("Bind before Open: %v", err)
	}
	s, err := Open(ctx, js, testKey(1), 1)
	if err != nil {
		t.Fatal(err)
	}
	names, err := s.List(ctx)
	if err != nil || len(names) != 0 {
		t.Fatalf("List on empty bucket = %v, %v", names, err)
	}
	if err := s.Set(ctx, "tok", json.RawMessage(`"abcdef"`)); err != nil {
		t.Fatal(err)
	}
	// The CLI's ls and rm work without the key; reading does not.
	b, err := Bind(ctx, js, nil)
	if err != nil {
		t.Fatal(err)
	}
	if names, err := b.List(ctx); err != nil || !reflect.DeepEqual(names, []string{"tok"}) {
		t.Errorf("List without key = %v, %v", names, err)
	}
	if _, err := b.Get(ctx, "tok"); err == nil || !strings.Contains(err.Error(), "no host key") {
		t.Errorf("Get without key: %v", err)
	}
	if _, err := Open(ctx, js, []byte("short"), 1); err == nil {
		t.Error("Open with a 5-byte key succeeded")
	}
}

func TestWrongKeyTamperAndMove(t *testing.T) {
	ctx := ctxT(t)
	s, js := openStore(t)
	const secret = `{"token":"very-secret-token-value"}`
	if err := s.Set(ctx, "api", json.RawMessage(secret)); err != nil {
		t.Fatal(err)
	}

	other, err := Bind(ctx, js, testKey(2))
	if err != nil {
		t.Fatal(err)
	}
	_, err = other.Get(ctx, "api")
	if err == nil || !strings.Contains(err.Error(), "another host key") ||
		!strings.Contains(err.Error(), KeyID(testKey(1))) || !strings.Contains(err.Error(), KeyID(testKey(2))) {
		t.Fatalf("Get with wrong key: %v", err)
	}
	assertNoValue(t, err, "very-secret-token-value")

	kv, _ := js.KeyValue(ctx, Bucket)
	e, err := kv.Get(ctx, "api")
	if err != nil {
		t.Fatal(err)
	}
	orig := e.Value()

	// Tampering with the ciphertext, or with the wrapped key.
	for _, field := range []string{"ciphertext", "wrapped_key", "nonce"} {
		var env envelope
		if err := json.Unmarshal(orig, &env); err != nil {
			t.Fatal(err)
		}
		switch field {
		case "ciphertext":
			env.Ciphertext[0] ^= 1
		case "wrapped_key":
			env.WrappedKey[len(env.WrappedKey)-1] ^= 1
		case "nonce":
			env.Nonce[0] ^= 1
		}
		b, _ := json.Marshal(env)
		if _, err := kv.Put(ctx, "api", b); err != nil {
			t.Fatal(err)
		}
		_, err := s.Get(ctx, "api")
		if err == nil || !strings.Contains(err.Error(), "tampered") {
			t.Errorf("tampered %s: %v", field, err)
		}
	}
	if _, err := kv.Put(ctx, "api", []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "api"); err == nil || !strings.Contains(err.Error(), "not a secrets envelope") {
		t.Errorf("garbage value: %v", err)
	}

	// A valid envelope copied under another name does not decrypt.
	if _, err := kv.Put(ctx, "moved", orig); err != nil {
		t.Fatal(err)
	}
	_, err = s.Get(ctx, "moved")
	if err == nil || !strings.Contains(err.Error(), "another secret's name") {
		t.Errorf("moved value: %v", err)
	}
	// Restored in place it decrypts again.
	if _, err := kv.Put(ctx, "api", orig); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "api"); err != nil || string(got) != secret {
		t.Errorf("restored: %s, %v", got, err)
	}
}

func assertNoValue(t *testing.T, err error, values ...string) {
	t.Helper()
	if err == nil {
		return
	}
	for _, v := range values {
		if strings.Contains(err.Error(), v) {
			t.Errorf("error reveals a secret value %q: %v", v, err)
		}
	}
}

func TestNames(t *testing.T) {
	ctx := ctxT(t)
	s, _ := openStore(t)
	good := []string{"a", "A1", "_x", "openai_api_key", "team/prod/db.password", "k=v", "a-b", "x.y.z", strings.Repeat("n", 128)}
	bad := []string{"", ".a", "-a", "/a", "=a", "a.", "a..b", "a b", "a*", "a>", "é", "a:b", "$secret", strings.Repeat("n", 129)}
	for _, n := range good {
		if err := ValidateName(n); err != nil {
			t.Errorf("ValidateName(%q) = %v", n, err)
		}
	}
	for _, n := range good[:3] {
		if err := s.Set(ctx, n, json.RawMessage(`1234`)); err != nil {
			t.Errorf("Set(%q) = %v", n, err)
		}
	}
	for _, n := range bad {
		err := s.Set(ctx, n, json.RawMessage(`1234`))
		if err == nil || !strings.Contains(err.Error(), "invalid secret name") {
			t.Errorf("Set(%q) = %v, want invalid name", n, err)
		}
	}
	err := s.Set(ctx, "ok", json.RawMessage(`not-json-secret`))
	if err == nil || !strings.Contains(err.Error(), "not valid JSON") {
		t.Errorf("Set invalid JSON: %v", err)
	}
	assertNoValue(t, err, "not-json-secret")
}

func TestLoadKey(t *testing.T) {
	dir := t.TempDir()

	if _, err := LoadKey(filepath.Join(dir, "missing"), false); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("LoadKey missing: %v", err)
	}

	p := filepath.Join(dir, "sub", "host.key")
	k1, err := LoadKey(p, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(k1) != KeySize {
		t.Fatalf("key length %d", len(k1))
	}
	info, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("created key mode %04o", info.Mode().Perm())
	}
	k2, err := LoadKey(p, true)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Errorf("second LoadKey changed the key or failed: %v", err)
	}
	if text, _ := os.ReadFile(p); strings.TrimSpace(string(text)) != hex.EncodeToString(k1) {
		t.Errorf("key file is not the key's hex: %q", text)
	}

	for _, mode := range []os.FileMode{0o640, 0o604, 0o644, 0o660} {
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		_, err := LoadKey(p, true)
		if err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("mode %04o: %v", mode, err)
		}
	}
	if err := os.Chmod(p, 0o400); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(p, false); err != nil {
		t.Errorf("mode 0400: %v", err)
	}

	raw := filepath.Join(dir, "raw.key")
	if err := os.WriteFile(raw, testKey(7), 0o600); err != nil {
		t.Fatal(err)
	}
	if k, err := LoadKey(raw, false); err != nil || !bytes.Equal(k, testKey(7)) {
		t.Errorf("raw key: %v", err)
	}

	bad := filepath.Join(dir, "bad.key")
	if err := os.WriteFile(bad, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(bad, true); err == nil || !strings.Contains(err.Error(), "is not a key") {
		t.Errorf("bad key: %v", err)
	}
	if _, err := LoadKey(dir, false); err == nil {
		t.Error("LoadKey of a directory succeeded")
	}
}

func TestResolveArgs(t *testing.T) {
	ctx := ctxT(t)
	s, _ := openStore(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Set(ctx, "token", json.RawMessage(`"tok-ABCDEFGH"`)))
	must(s.Set(ctx, "db", json.RawMessage(`{"user":"admin","password":"hunter2-hunter2"}`)))
	must(s.Set(ctx, "big", json.RawMessage(`12345678901234567890`)))

	args := map[string]any{
		"plain": "hello",
		"tok":   "$secret:token",
		"nested": map[string]any{
			"list": []any{"x", "$secret:db", map[string]any{"again": "$secret:token"}},
			"n":    float64(3),
		},
		"num":    "$secret:big",
		"almost": " $secret:token",
	}
	all := func(string) bool { return true }
	orig, _ := json.Marshal(args)
	out, red, err := s.ResolveArgs(ctx, args, all)
	if err != nil {
		t.Fatal(err)
	}
	if after, _ := json.Marshal(args); !bytes.Equal(orig, after) {
		t.Errorf("ResolveArgs modified its input: %s", after)
	}
	got, _ := json.Marshal(out)
	want := `{"almost":" $secret:token","nested":{"list":["x",{"password":"hunter2-hunter2","user":"admin"},{"again":"tok-ABCDEFGH"}],"n":3},"num":12345678901234567890,"plain":"hello","tok":"tok-ABCDEFGH"}`
	if string(got) != want {
		t.Errorf("resolved:\n got %s\nwant %s", got, want)
	}
	red2 := red.RedactString(string(got))
	for _, v := range []string{"tok-ABCDEFGH", "hunter2-hunter2", "12345678901234567890"} {
		if strings.Contains(red2, v) {
			t.Errorf("redacted output still has %q: %s", v, red2)
		}
	}
	if !strings.Contains(red2, `"plain":"hello"`) {
		t.Errorf("redaction went too far: %s", red2)
	}

	// A missing secret deep inside: the error names the argument and the
	// secret, and no resolved value.
	args["nested"].(map[string]any)["list"] = []any{"$secret:db", map[string]any{"k": "$secret:nope"}}
	_, _, err = s.ResolveArgs(ctx, args, all)
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing secret: %v", err)
	}
	for _, want := range []string{`secret "nope" not found`, "nested.list[1].k", "host secrets set nope"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	assertNoValue(t, err, "tok-ABCDEFGH", "hunter2", "admin")

	// No references: same content, empty redactor.
	out, red, err = s.ResolveArgs(ctx, map[string]any{"a": "b"}, nil)
	if err != nil || !red.Empty() || out["a"] != "b" {
		t.Errorf("no refs: %v %v %v", out, red, err)
	}
	if out, _, err := s.ResolveArgs(ctx, nil, nil); err != nil || out != nil {
		t.Errorf("nil args: %v %v", out, err)
	}
}

func TestResolveArgsOnlyDeclared(t *testing.T) {
	ctx := ctxT(t)
	s, _ := openStore(t)
	if err := s.Set(ctx, "token", json.RawMessage(`"tok-ABCDEFGH"`)); err != nil {
		t.Fatal(err)
	}
	onlyToken := func(n string) bool { return n == "token" }
	cases := []struct {
		name    string
		args    map[string]any
		declare func(string) bool
		refused string // the secret named in the error; "" = resolves
	}{
		{"declared", map[string]any{"a": "$secret:token"}, onlyToken, ""},
		{"undeclared", map[string]any{"a": "$secret:hook-key"}, onlyToken, "hook-key"},
		{"undeclared deep beside a declared one", map[string]any{"a": "$secret:token", "b": []any{map[string]any{"c": "$secret:other"}}}, onlyToken, "other"},
		// Refused before the store is read: a missing undeclared secret is not "not found".
		{"undeclared and missing", map[string]any{"a": "$secret:nope"}, onlyToken, "nope"},
		{"nil declares nothing", map[string]any{"a": "$secret:token"}, nil, "token"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, red, err := s.ResolveArgs(ctx, c.args, c.declare)
			if c.refused == "" {
				if err != nil || out["a"] != "tok-ABCDEFGH" || red.Empty() {
					t.Fatalf("ResolveArgs = %v, %v", out, err)
				}
				return
			}
			if !errors.Is(err, ErrUndeclared) || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `"`+c.refused+`"`) || out != nil {
				t.Fatalf("ResolveArgs = %v, %v; want ErrUndeclared naming %q", out, err, c.refused)
			}
			assertNoValue(t, err, "tok-ABCDEFGH")
		})
	}
	if got := Refs(map[string]any{"x": []any{"$secret:b", "$secret:a", map[string]any{"y": "$secret:b"}}, "z": " $secret:c"}); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("Refs = %v", got)
	}
}

func TestResolveEnv(t *testing.T) {
	ctx := ctxT(t)
	s, _ := openStore(t)
	cases := []struct{ stored, env string }{
		{`"plain-string-value"`, `plain-string-value`},
		{`"with \"quotes\"\nnewline"`, "with \"quotes\"\nnewline"},
		{`{ "a" : [1001, 2002] ,"b":"c d e" }`, `{"a":[1001,2002],"b":"c d e"}`},
		{`4242.5`, `4242.5`},
	}
	for i, c := range cases {
		name := "env" + string(rune('a'+i))
		if err := s.Set(ctx, name, json.RawMessage(c.stored)); err != nil {
			t.Fatal(err)
		}
		v, red, err := s.Resolve(ctx, name)
		if err != nil {
			t.Fatalf("Resolve %s: %v", name, err)
		}
		if v != c.env {
			t.Errorf("Resolve(%s) = %q, want %q", c.stored, v, c.env)
		}
		if len(v) >= MinRedactLen {
			if got := red.RedactString("x=" + v + ";"); got != "x="+Redacted+";" {
				t.Errorf("redact env value %q: %q", v, got)
			}
		}
	}
	_, _, err := s.Resolve(ctx, "absent")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `"absent"`) {
		t.Errorf("Resolve missing: %v", err)
	}
}

func TestSetRefusesShortValues(t *testing.T) {
	ctx := ctxT(t)
	s, _ := openStore(t)
	for _, v := range []string{`"abc"`, `7`, `{"user":"admin","pin":123}`, `false`} {
		err := s.Set(ctx, "short", json.RawMessage(v))
		if err == nil || !strings.Contains(err.Error(), `"short"`) {
			t.Errorf("Set(%s) = %v, want a refusal naming the secret", v, err)
		}
	}
	if _, err := s.Get(ctx, "short"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a refused value was stored: %v", err)
	}
}

// Webhook keys live in a bucket of their own: a function secret of the same name is another
// value, and a sealed key copied into the function bucket does not decrypt there.
func TestHookKeysApart(t *testing.T) {
	ctx := ctxT(t)
	s, js := openStore(t)
	hk, err := OpenHookKeys(ctx, js, testKey(1), 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := hk.Set(ctx, "gh-key", json.RawMessage(`"whsec-hook-value"`)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "gh-key"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the function store sees the hook key: %v", err)
	}
	if _, _, err := s.ResolveArgs(ctx, map[string]any{"k": "$secret:gh-key"}, func(string) bool { return true }); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ResolveArgs reached the hook key: %v", err)
	}
	if got, err := hk.Get(ctx, "gh-key"); err != nil || string(got) != `"whsec-hook-value"` {
		t.Fatalf("hook key Get = %s, %v", got, err)
	}
	// Copy the sealed value across buckets, as someone with write access to the KV could.
	src, _ := js.KeyValue(ctx, HookKeysBucket)
	dst, _ := js.KeyValue(ctx, Bucket)
	e, err := src.Get(ctx, "gh-key")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dst.Put(ctx, "gh-key", e.Value()); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Get(ctx, "gh-key"); err == nil || !strings.Contains(err.Error(), "cannot decrypt") {
		t.Fatalf("a copied hook key decrypted as a function secret: %s %v", v, err)
	}
	if _, err := hk.Get(ctx, "absent"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "host secrets set --hook absent") {
		t.Fatalf("missing hook key: %v", err)
	}
	if err := hk.Set(ctx, "short", json.RawMessage(`"abc"`)); err == nil || !strings.Contains(err.Error(), "cannot be redacted") {
		t.Fatalf("short hook key: %v", err)
	}
	if names, err := hk.List(ctx); err != nil || !reflect.DeepEqual(names, []string{"gh-key"}) {
		t.Fatalf("List = %v %v", names, err)
	}
	if err := hk.Delete(ctx, "gh-key"); err != nil {
		t.Fatal(err)
	}
}

// A value sealed with a key that is not the hosts' was stored without a word until now and
// found unreadable only when a job needed it: Set refuses it, whoever binds the store, and a
// host started with the wrong key leaves the bucket's key as it is.
func TestSetWithWrongKeyRefused(t *testing.T) {
	ctx := ctxT(t)
	s, js := openStore(t) // the hosts' key: testKey(1)
	for _, tc := range []struct {
		name string
		bind func() (*Store, error)
	}{
		{"CLI with another key file", func() (*Store, error) { return Bind(ctx, js, testKey(2)) }},
		{"host started with another key", func() (*Store, error) { return Open(ctx, js, testKey(3), 1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			other, err := tc.bind()
			if err != nil {
				t.Fatal(err)
			}
			if other.KeyMismatch() == nil {
				t.Fatal("KeyMismatch is nil for a key that is not the hosts'")
			}
			err = other.Set(ctx, "wrongly-keyed", json.RawMessage(`"a value nobody could read"`))
			if err == nil || !strings.Contains(err.Error(), "not the hosts' key") || !strings.Contains(err.Error(), KeyID(testKey(1))) {
				t.Fatalf("Set with a key that is not the hosts' = %v, want a refusal naming the hosts' kek_id", err)
			}
			assertNoValue(t, err, "a value nobody could read")
			if names, _ := s.List(ctx); len(names) != 0 {
				t.Fatalf("the refused value was stored: %v", names)
			}
		})
	}
	if s.KeyMismatch() != nil {
		t.Fatalf("the hosts' own store reports a mismatch: %v", s.KeyMismatch())
	}
	// The first host's key is still the bucket's, so its store keeps setting.
	again, err := Open(ctx, js, testKey(1), 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := again.Set(ctx, "right", json.RawMessage(`"rightly keyed value"`)); err != nil {
		t.Fatalf("Set with the hosts' key after another host opened the bucket: %v", err)
	}
}
