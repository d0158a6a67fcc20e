package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInvokePayloadSources(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.json"), filepath.Join(dir, "bad.json")
	os.WriteFile(good, []byte(`{"name":"Ada"}`+"\n"), 0o644)
	os.WriteFile(bad, []byte(`{"name":`), 0o644)
	cases := []struct {
		arg, stdin string
		want       string   // the payload
		errs       []string // substrings of the error
	}{
		{arg: `{"a":1}`, want: `{"a":1}`},
		{arg: "-", stdin: ` {"b":2} `, want: `{"b":2}`},
		{arg: "-", stdin: "", want: `{}`},
		{arg: "@" + good, want: `{"name":"Ada"}`},
		{arg: "@" + bad, errs: []string{bad, "not valid JSON", "unexpected end of JSON input"}},
		{arg: "-", stdin: "[1]", errs: []string{"stdin", "must be a JSON object"}},
		{arg: "@" + filepath.Join(dir, "missing.json"), errs: []string{"missing.json", "no such file"}},
		{arg: `{"a":`, errs: []string{"the argument", "not valid JSON"}},
	}
	for _, c := range cases {
		t.Run(c.arg, func(t *testing.T) {
			got, err := readPayload(c.arg, strings.NewReader(c.stdin))
			if c.errs == nil {
				if err != nil || string(got) != c.want {
					t.Fatalf("got %q, %v; want %q", got, err, c.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("want an error, got payload %q", got)
			}
			for _, w := range c.errs {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestInvokeRefusesABadPayloadFileBeforeConnecting: the payload is read and refused before
// any connection, so nothing is published (the NATS address answers nobody), with exit status 2:
// the job could not run.
func TestInvokeRefusesABadPayloadFileBeforeConnecting(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte("not json"), 0o644)
	_, errOut, code := run(t, "--nats", "nats://"+freeAddr(t), "invoke", "hello", "@"+bad)
	if code != 2 || !strings.Contains(errOut, bad) || !strings.Contains(errOut, "not valid JSON") || strings.Contains(errOut, "connect to NATS") {
		t.Fatalf("code %d: %s", code, errOut)
	}
}
