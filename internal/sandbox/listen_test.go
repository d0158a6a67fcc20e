package sandbox

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
)

// TestListenInJail: the host's socket listens in the jail's network namespace before the
// command starts (the command connects at once, without retrying), and the jail's
// connections reach the host through it.
func TestListenInJail(t *testing.T) {
	b := newTestBwrap(t)
	if !b.ListensIn() {
		t.Skip("SKIPPING: this host may not enter a jail's network namespace (not root); the runner uses the in-jail forwarder here, and its tests cover that")
	}
	var listener net.Listener
	spec := &Spec{
		Argv:    bash(`exec 3<>/dev/tcp/127.0.0.1/3128 && echo ping >&3 && read -r answer <&3 && echo "$answer"`),
		WorkDir: testDir(t, b, false),
		Listen: &Listen{Addr: netip.MustParseAddrPort("127.0.0.1:3128"), Ready: func(l net.Listener) {
			listener = l
			go func() {
				c, err := l.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				c.Write([]byte("pong " + line))
			}()
		}},
	}
	var out, errOut strings.Builder
	spec.Stdout, spec.Stderr = &out, &errOut
	res, err := Run(context.Background(), b, spec)
	if listener != nil {
		defer listener.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || strings.TrimSpace(out.String()) != "pong ping" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want the host's answer, pong ping", res.ExitCode, out.String(), errOut.String())
	}
	if res.Marks.Listened.IsZero() || res.Marks.Listened.After(res.Marks.Released) {
		t.Fatalf("listened at %v, command released at %v: the socket must come first", res.Marks.Listened, res.Marks.Released)
	}
}

func TestListenRefused(t *testing.T) {
	hardened := newTestBwrap(t)
	ready := func(l net.Listener) { l.Close() }
	cases := []struct {
		name string
		jail *Bwrap
		spec Spec
		want string
	}{
		{"unhardened", newPlainBwrap(t), Spec{Listen: &Listen{Addr: netip.MustParseAddrPort("127.0.0.1:3128"), Ready: ready}}, ErrNoListen.Error()},
		{"host network", hardened, Spec{Network: NetworkHost, Listen: &Listen{Addr: netip.MustParseAddrPort("127.0.0.1:3128"), Ready: ready}}, "own network namespace"},
		{"no Ready", hardened, Spec{Listen: &Listen{Addr: netip.MustParseAddrPort("127.0.0.1:3128")}}, "without Ready"},
		{"IPv6", hardened, Spec{Listen: &Listen{Addr: netip.MustParseAddrPort("[::1]:3128"), Ready: ready}}, "only IPv4"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.jail == hardened && !hardened.ListensIn() {
				t.Skip("SKIPPING: this host may not enter a jail's network namespace (not root)")
			}
			s := c.spec
			s.Argv, s.WorkDir = []string{"true"}, testDir(t, c.jail, false)
			_, err := Run(context.Background(), c.jail, &s)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Run = %v, want an error saying %q", err, c.want)
			}
			if c.name == "unhardened" && !errors.Is(err, ErrNoListen) {
				t.Fatalf("Run = %v, want ErrNoListen", err)
			}
		})
	}
}
