package system_test

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// TestNetworkHostIsTheOperatorsDecision is the red team's attack: a function's author writes
// `network: host` and the jail shares the host's network, so the job opens a socket to the host's
// own NATS and talks to the whole JetStream API. Unless the operator allowed that function, it
// must not be served at all (the probe never runs), while the other functions keep serving.
func TestNetworkHostIsTheOperatorsDecision(t *testing.T) {
	cases := []struct {
		name    string
		allow   []string
		served  bool
		wantOut string
	}{
		{name: "nobody allowed", allow: nil, served: false},
		{name: "another function allowed", allow: []string{"other"}, served: false},
		{name: "allowed by name", allow: []string{"other", "probe"}, served: true, wantOut: `"CONNECTED"`},
		{name: "all allowed", allow: []string{"*"}, served: true, wantOut: `"CONNECTED"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := hosttest.New(t, map[string]string{"hello.sh": "echo '\"hi\"'\n"}, func(c *app.Config) {
				c.AllowNetworkHost = tc.allow
			})
			addr := strings.TrimPrefix(h.Srv.ClientURL(), "nats://")
			nhost, port, _ := net.SplitHostPort(addr)
			// The NATS greeting proves the socket reached the server, not just any listener.
			h.Write("probe.py", fmt.Sprintf(`# sandbox
# network: host
import socket
def main():
    try:
        s = socket.create_connection(("%s", %s), timeout=2)
        hello = s.recv(4).decode()
        s.close()
        return "CONNECTED" if hello == "INFO" else "other:" + hello
    except OSError as e:
        return "refused: " + str(e)
`, nhost, port))
			// A function written after the probe: once it is served, the reload saw the probe too.
			h.Write("marker.sh", "echo '\"here\"'\n")
			h.Eventually("the reload after the probe was written", func() bool {
				return string(h.Call("marker", `{}`).Data) == `"here"`
			})
			got := string(h.Call("probe", `{}`).Data)
			if !tc.served {
				if !strings.Contains(got, "no function named") {
					t.Fatalf("a network: host function the operator did not allow was served; it answered %s", got)
				}
			} else if got != tc.wantOut {
				t.Fatalf("allowed network: host probe: got %s, want %s", got, tc.wantOut)
			}
			if got := string(h.Call("hello", `{}`).Data); got != `"hi"` {
				t.Fatalf("the other functions must keep serving: hello answered %s", got)
			}
		})
	}
}
