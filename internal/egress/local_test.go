package egress

import (
	"net/http"
	"strings"
	"testing"
)

// A Local service is served by the proxy itself, as plain HTTP on port 80, whatever the
// allowlist says; a tunnel to it or another port is refused, and other names go their way.
func TestLocalServices(t *testing.T) {
	f := startProxy(t, staticDNS(nil), nil, Policy{Allow: []string{"api.example.com"}, Local: map[string]http.Handler{"host.mcp": helloHandler("local")}})
	cases := []struct {
		req    string
		status int
		msg    string
	}{
		{"GET http://host.mcp/mcp HTTP/1.1\r\nHost: host.mcp\r\n\r\n", 200, "local"},
		{"GET http://HOST.MCP:80/x HTTP/1.1\r\nHost: host.mcp\r\n\r\n", 200, "local"},
		{"CONNECT host.mcp:443 HTTP/1.1\r\nHost: host.mcp:443\r\n\r\n", 400, "served by the host itself, as plain HTTP on port 80: use http://host.mcp/"},
		{"GET http://host.mcp:8080/ HTTP/1.1\r\nHost: host.mcp:8080\r\n\r\n", 400, "use http://host.mcp/"},
		{"GET http://other.test/ HTTP/1.1\r\nHost: other.test\r\n\r\n", 403, "not in this function's allowlist"},
	}
	for _, tc := range cases {
		name, _, _ := strings.Cut(tc.req, "\r\n")
		t.Run(name, func(t *testing.T) {
			resp, body := f.raw(t, tc.req)
			if resp.StatusCode != tc.status || !strings.Contains(body, tc.msg) {
				t.Fatalf("got %d %q; want %d containing %q", resp.StatusCode, body, tc.status, tc.msg)
			}
		})
	}
}
