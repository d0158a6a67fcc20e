package egress

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

func TestAllowlistMatch(t *testing.T) {
	al, err := parseAllowlist([]string{
		"api.example.com",
		"*.Example.org",
		"git.example.net:8443",
		"*.svc.example.net:9000",
		"203.0.113.7",
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		host string
		port uint16
		want string
	}{
		{"api.example.com", 443, ""},
		{"api.example.com", 80, ""},
		{"api.example.com", 8080, "port"},
		{"www.example.com", 443, "not_allowlisted"},
		{"example.com", 443, "not_allowlisted"},
		{"xapi.example.com", 443, "not_allowlisted"},
		{"api.example.com.evil.test", 443, "not_allowlisted"},
		// Wildcards match any depth below the domain, not the domain itself.
		{"a.example.org", 443, ""},
		{"a.b.example.org", 80, ""},
		{"example.org", 443, "not_allowlisted"},
		{"aexample.org", 443, "not_allowlisted"},
		// A port in the entry is the only port for that host.
		{"git.example.net", 8443, ""},
		{"git.example.net", 443, "port"},
		{"a.svc.example.net", 9000, ""},
		{"a.svc.example.net", 443, "port"},
		{"svc.example.net", 9000, "not_allowlisted"},
		{"203.0.113.7", 443, ""},
		{"203.0.113.8", 443, "not_allowlisted"},
	}
	for _, tc := range cases {
		tg, err := newTarget(tc.host, tc.port)
		if err != nil {
			t.Fatalf("newTarget(%q): %v", tc.host, err)
		}
		if got := al.check(tg); got != tc.want {
			t.Errorf("%s:%d: %q, want %q", tc.host, tc.port, got, tc.want)
		}
	}

	var empty allowlist
	for port, want := range map[uint16]string{443: "", 80: "", 22: "port", 8443: "port"} {
		if got := empty.check(target{host: "any.example.com", port: port}); got != want {
			t.Errorf("empty allowlist, port %d: %q, want %q", port, got, want)
		}
	}
	if got, want := al.String(), "api.example.com *.example.org git.example.net:8443 *.svc.example.net:9000 203.0.113.7"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestParseAllowlistErrors(t *testing.T) {
	for _, e := range []string{
		"", "*", "*.", "*.*.example.com", "a..b", "-a.example.com", "a-.example.com",
		"example.com:", "example.com:0", "example.com:65536", "example.com:+80", "example.com:http",
		"http://example.com", "example.com/path", "exa mple.com", "ex*ample.com", "a.*.example.com",
		"[::1]:443", "*.10.0.0.1", "127.1", strings.Repeat("a", 64) + ".com",
	} {
		if _, err := parseAllowlist([]string{e}); err == nil {
			t.Errorf("parseAllowlist(%q) accepted it", e)
		}
	}
}

func TestParseAuthority(t *testing.T) {
	cases := []struct {
		in, host string
		port     uint16
		err      string
	}{
		{"api.example.com:443", "api.example.com", 443, ""},
		{"API.Example.COM.:443", "api.example.com", 443, ""},
		{"my_host.example.com:443", "my_host.example.com", 443, ""},
		{"8.8.8.8:53", "8.8.8.8", 53, ""},
		{"[2001:db8::1]:443", "2001:db8::1", 443, ""},
		{"[::ffff:1.2.3.4]:443", "::ffff:1.2.3.4", 443, ""},
		{"api.example.com", "", 0, "CONNECT needs host:port"},
		{":443", "", 0, "empty host"},
		{"api.example.com:", "", 0, `port ""`},
		{"api.example.com:0", "", 0, `port "0"`},
		{"api.example.com:65536", "", 0, `port "65536"`},
		{"api.example.com:+443", "", 0, `port "+443"`},
		{"[fe80::1%eth0]:443", "", 0, "zone"},
		{"a..b:443", "", 0, "not a host name"},
		{".example.com:443", "", 0, "not a host name"},
		{"ex ample.com:443", "", 0, "not a host name"},
		{"ex%41mple.com:443", "", 0, "not a host name"},
		{strings.Repeat("a.", 127) + "com:443", "", 0, "not a host name"},
		{"2130706433:443", "", 0, "neither an IP address nor a host name"},
		{"127.1:443", "", 0, "neither an IP address nor a host name"},
		{"0x7f.0.0.1:443", "", 0, "neither an IP address nor a host name"},
		{"1.2.3.4.5:443", "", 0, "neither an IP address nor a host name"},
	}
	for _, tc := range cases {
		tg, err := parseAuthority(tc.in)
		if tc.err != "" {
			if err == nil || !errors.Is(err, errBadRequest) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseAuthority(%q) = %+v, %v; want a bad request with %q", tc.in, tg, err, tc.err)
			}
			continue
		}
		if err != nil || tg.host != tc.host || tg.port != tc.port {
			t.Errorf("parseAuthority(%q) = %+v, %v; want %s port %d", tc.in, tg, err, tc.host, tc.port)
		}
	}
}

func TestParseForwardURL(t *testing.T) {
	cases := []struct {
		in, host string
		port     uint16
		err      string
	}{
		{"http://example.com/x", "example.com", 80, ""},
		{"HTTP://Example.com:8080/x?y", "example.com", 8080, ""},
		{"http://[2001:db8::1]/", "2001:db8::1", 80, ""},
		{"/relative", "", 0, "this is a proxy"},
		{"https://example.com/", "", 0, "CONNECT"},
		{"ftp://example.com/", "", 0, `scheme "ftp"`},
		{"http://example.com:99999/", "", 0, `port "99999"`},
		{"http:///nohost", "", 0, "this is a proxy"},
	}
	for _, tc := range cases {
		u, err := url.Parse(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		tg, err := parseForwardURL(u)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseForwardURL(%q) = %+v, %v; want error with %q", tc.in, tg, err, tc.err)
			}
			continue
		}
		if err != nil || tg.host != tc.host || tg.port != tc.port {
			t.Errorf("parseForwardURL(%q) = %+v, %v", tc.in, tg, err)
		}
	}
}
