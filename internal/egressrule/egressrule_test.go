package egressrule

import (
	"strings"
	"testing"
)

func TestGlob(t *testing.T) {
	cases := []struct {
		glob string
		in   []string
		out  []string
	}{
		{"/v1/messages", []string{"/v1/messages"}, []string{"/v1/messages/x", "/v1/message", "/v1/messagesx"}},
		{"/repos/acme/**", []string{"/repos/acme", "/repos/acme/", "/repos/acme/a/b/c"}, []string{"/repos/acmex", "/repos/other"}},
		{"/repos/*/issues", []string{"/repos/acme/issues", "/repos//issues"}, []string{"/repos/a/b/issues", "/repos/acme/issues/1"}},
		{"/a/**/z", []string{"/a/b/z", "/a/b/c/z"}, []string{"/a/z/y"}},
		{"/files/*.txt", []string{"/files/a.txt"}, []string{"/files/a/b.txt", "/files/atxt"}},
	}
	for _, tc := range cases {
		re, err := compileGlob(tc.glob)
		if err != nil {
			t.Fatalf("%s: %v", tc.glob, err)
		}
		for _, p := range tc.in {
			if !re.MatchString(p) {
				t.Errorf("%s does not match %s", tc.glob, p)
			}
		}
		for _, p := range tc.out {
			if re.MatchString(p) {
				t.Errorf("%s matches %s", tc.glob, p)
			}
		}
	}
	for _, bad := range []string{"repos", "/a/../b", "/a/b**", "/a?b", "/a b", "/a%2Fb"} {
		if _, err := compileGlob(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestCheck(t *testing.T) {
	for _, r := range []Rule{
		{Method: "GET", Host: "api.example.com"},
		{Method: "*", Host: "*.example.com", Path: "/repos/**"},
		{Method: "POST", Host: "10.0.0.1", Path: "/v1/messages"},
	} {
		if err := Check(r); err != nil {
			t.Errorf("%s: %v", r, err)
		}
	}
	for _, tc := range []struct {
		r   Rule
		err string
	}{
		{Rule{Method: "get", Host: "a.example.com"}, "upper-case HTTP method"},
		{Rule{Method: "GET", Host: "a.example.com:8443"}, "without a port"},
		{Rule{Method: "GET", Host: "a.example.com", Path: "repos"}, "must start with /"},
		{Rule{Method: "GET", Host: "a..example.com"}, "not a host name"},
	} {
		if err := Check(tc.r); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want %q", tc.r, err, tc.err)
		}
	}
}
