package system_test

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// A jailed function's default network is the egress proxy: it reaches an explicitly permitted
// target through HTTPS_PROXY/HTTP_PROXY, and nothing else.
//
// It runs on both ways to the proxy (the host holding the job's proxy address in its jail, and
// the jail init forwarding to a Unix socket, for hosts without CAP_SYS_ADMIN), warm and cold.
// Warm, the script's top-level code runs ahead of the job and has no network.
func TestEgressProxyIsTheOnlyWayOut(t *testing.T) {
	for _, way := range []struct {
		name          string
		forwardInJail bool
	}{{"host holds the address", false}, {"jail init forwards", true}} {
		for _, mode := range []struct {
			name string
			warm int
		}{{"warm", 1}, {"cold", -1}} {
			t.Run(way.name+"/"+mode.name, func(t *testing.T) {
				testEgressOnlyWayOut(t, func(c *app.Config) { c.EgressForwardInJail, c.Warm = way.forwardInJail, mode.warm })
			})
		}
	}
}

func testEgressOnlyWayOut(t *testing.T, tweak func(*app.Config)) {
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
	topLevel := fmt.Sprintf(`# sandbox
# network: %s
import urllib.request

def fetch():
    try:
        with urllib.request.urlopen(%q, timeout=10) as r:
            return r.read().decode()
    except Exception as e:
        return "refused: " + str(e)

TOP = fetch()

def main():
    return {"top": TOP, "main": fetch()}
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
		"toplevel.py":    topLevel,
	}, func(c *app.Config) {
		c.EgressPermit = []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}
		tweak(c)
	})
	var cfg app.Config
	tweak(&cfg)

	// Top-level code: run ahead of the job in a warm jail, where it gets no way out; with
	// the job in a cold one.
	var top map[string]string
	if cfg.Warm > 0 {
		top = hosttest.Decode[map[string]string](t, callWarm(t, h, "toplevel", "{}"))
		if strings.Contains(top["top"], "hello") || !strings.Contains(top["top"], "refused:") {
			t.Fatalf("top-level code of a warm jail, before its job: %q; want its request refused", top["top"])
		}
	} else {
		top = hosttest.Decode[map[string]string](t, h.Call("toplevel", "{}").Data)
		if top["top"] != `"hello from outside"` {
			t.Fatalf("top-level code of a cold jail, with its job: %q; want the target's answer", top["top"])
		}
	}
	t.Logf("top-level code: %s", top["top"])
	if top["main"] != `"hello from outside"` {
		t.Fatalf("main after top-level code: %q; want the target's answer", top["main"])
	}

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
