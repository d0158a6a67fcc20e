package host_test

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agenthost/host/internal/host/wire"
	"github.com/agenthost/host/internal/hosttest"
)

// A jailed function's default network is the egress proxy: it reaches an explicitly permitted
// target through HTTPS_PROXY/HTTP_PROXY, and nothing else.
func TestEgressProxyIsTheOnlyWayOut(t *testing.T) {
	// 127.0.0.2, not 127.0.0.1: clients skip the proxy for 127.0.0.1 (NO_PROXY), and this
	// request must go through it.
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("SKIPPED LOUDLY: cannot listen on 127.0.0.2 here: %v", err)
	}
	var hits atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, `"hello from outside"`)
	})}
	go srv.Serve(l)
	defer srv.Close()
	target := "http://" + l.Addr().String() + "/"
	// The proxy opens ports 80 and 443 only, unless the allowlist names another.
	allow := "proxy " + l.Addr().String()
	fetch := func(network string) string {
		return fmt.Sprintf(`# sandbox
# network: %s
curl -sS --max-time 10 %s 2>&1 | tail -1
`, network, target)
	}
	py := fmt.Sprintf(`# sandbox
# network: %s
import urllib.request
def main():
    with urllib.request.urlopen(%q, timeout=10) as r:
        return r.read().decode()
`, allow, target)
	ts := fmt.Sprintf(`// sandbox
// network: %s
export async function main() {
  const r = await fetch(%q);
  return await r.text();
}
`, allow, target)
	h := hosttest.New(t, map[string]string{
		"viaproxy.sh":    fetch(allow),
		"defaultport.sh": fetch("proxy"),
		"allowlist.sh":   fetch("proxy api.example.com"),
		"nonet.sh":       fetch("none"),
		"pyfetch.py":     py,
		"bunfetch.ts":    ts,
		"metadata.sh":    "# sandbox\ncurl -s -o /dev/null -w '%{http_code}' --max-time 10 http://169.254.169.254/latest/meta-data/; echo\n",
		"private.sh":     "# sandbox\ncurl -s -o /dev/null -w '%{http_code}' --max-time 10 http://10.0.0.1/; echo\n",
		"hostnats.sh":    "# sandbox\ncurl -s -o /dev/null -w '%{http_code}' --max-time 10 --noproxy '' -x \"$HTTP_PROXY\" http://127.0.0.1:4222/; echo\n",
	}, func(c *wire.Config) { c.EgressPermit = []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")} })

	for _, fn := range []string{"viaproxy", "pyfetch", "bunfetch"} {
		if got := string(h.Call(fn, "{}").Data); got != `"\"hello from outside\""` && got != `"hello from outside"` {
			t.Fatalf("%s through the proxy: %s", fn, got)
		}
	}
	before := hits.Load()
	if got := string(h.Call("allowlist", "{}").Data); !strings.Contains(got, "egress denied") || !strings.Contains(got, "allowlist") {
		t.Fatalf("a host outside the allowlist: %s", got)
	}
	if got := string(h.Call("defaultport", "{}").Data); !strings.Contains(got, "egress denied: port") {
		t.Fatalf("a port the allowlist does not name: %s", got)
	}
	if got := string(h.Call("nonet", "{}").Data); strings.Contains(got, "hello") {
		t.Fatalf("network: none reached the target: %s", got)
	}
	if hits.Load() != before {
		t.Fatal("a refused request reached the target")
	}
	// Through the proxy, the usual targets of a jail escape are refused too.
	for _, fn := range []string{"metadata", "private", "hostnats"} {
		if got := string(h.Call(fn, "{}").Data); got != "403" {
			t.Fatalf("%s through the proxy: %s, want 403", fn, got)
		}
	}
}
