package main

import (
	"strings"
	"testing"
)

func TestParseResolve(t *testing.T) {
	got, err := parseResolve([]string{"API.Anthropic.com.=127.0.0.1:8443", "v6.example.com=[::1]:443"})
	if err != nil {
		t.Fatal(err)
	}
	if got["api.anthropic.com"].String() != "127.0.0.1:8443" || got["v6.example.com"].String() != "[::1]:443" {
		t.Fatalf("got %v", got)
	}
	for spec, want := range map[string]string{
		"api.example.com":                  "want <host>=<ip>:<port>",
		"=127.0.0.1:1":                     "want <host>=<ip>:<port>",
		"api.example.com=127.0.0.1":        "is not <ip>:<port>",
		"api.example.com=localhost:443":    "is not <ip>:<port>",
		"api.example.com=127.0.0.1:0":      "is not <ip>:<port>",
		"api.example.com:443=127.0.0.1:44": "is not a host name",
	} {
		if _, err := parseResolve([]string{spec}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v; want %q", spec, err, want)
		}
	}
	if _, err := parseResolve([]string{"a.example.com=127.0.0.1:1", "A.example.com=127.0.0.1:2"}); err == nil || !strings.Contains(err.Error(), "pinned twice") {
		t.Errorf("a name pinned twice: %v", err)
	}
}
