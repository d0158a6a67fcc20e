package cluster_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A lab is a small network of its own, made of network namespaces: a hub namespace holding a
// bridge, and on that bridge one namespace per "site" (a NATS node and the host beside it) plus
// one for the test's own clients. Every address lives inside those namespaces (10.77.0.0/24 on
// the bridge, each namespace's own loopback), so nothing the test does reaches the machine's
// network, and two labs side by side do not see each other. A partition is a link set down:
// a site's bridge port (the site cut off from everything but itself), or a site's loopback
// (the host cut off from the node it talks to over it, while both stay on the bridge). The
// kernels this runs on may have no netem and no netfilter; link state needs neither.
type lab struct {
	t      testing.TB
	prefix string // of every namespace name, unique to the test process and the lab
	hub    string
	ctl    *netns
	sites  []*netns
}

// netns is one network namespace of a lab and its address on the lab's bridge.
type netns struct {
	lab  *lab
	name string
	addr string // on the bridge
	port string // its veth's end in the hub namespace, the one a cut sets down
	fd   int    // open for the test's own dials from inside it
}

var labSeq atomic.Int32

// homeNetns is the test process's own network namespace, opened before any thread leaves it.
var homeNetns = sync.OnceValues(func() (int, error) {
	fd, err := unix.Open("/proc/self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open the test's own network namespace: %w", err)
	}
	return fd, nil
})

// labSubnet is the bridge's /24; site i is .i (1-based), the test's client namespace .100.
const labSubnet = "10.77.0."

// newLab makes the hub, the client namespace and sites namespaces, all removed when the test
// ends. It skips, loudly, where namespaces cannot be made (not root, no CAP_NET_ADMIN, no ip).
func newLab(t testing.TB, sites int) *lab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED LOUDLY: the partition tests make network namespaces and veth links, which needs root (CAP_NET_ADMIN)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("SKIPPED LOUDLY: the partition tests need `ip` (iproute2; scripts/setup installs it)")
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Skip("SKIPPED LOUDLY: the partition tests need `nsenter` (util-linux) to start processes in a namespace")
	}
	if _, err := homeNetns(); err != nil {
		t.Skipf("SKIPPED LOUDLY: %v", err)
	}
	l := &lab{t: t, prefix: fmt.Sprintf("agentlab-%d-%d-", os.Getpid(), labSeq.Add(1))}
	l.hub = l.prefix + "hub"
	t.Cleanup(l.remove)
	if err := l.ip("netns", "add", l.hub); err != nil {
		t.Skipf("SKIPPED LOUDLY: cannot make a network namespace here (no CAP_NET_ADMIN?): %v", err)
	}
	steps := [][]string{
		{"-n", l.hub, "link", "add", "br0", "type", "bridge"},
		{"-n", l.hub, "link", "set", "br0", "up"},
	}
	for _, s := range steps {
		if err := l.ip(s...); err != nil {
			t.Skipf("SKIPPED LOUDLY: cannot make a bridge in a network namespace here: %v", err)
		}
	}
	for i := 1; i <= sites; i++ {
		l.sites = append(l.sites, l.add(fmt.Sprintf("site%d", i), fmt.Sprintf("%s%d", labSubnet, i)))
	}
	l.ctl = l.add("ctl", labSubnet+"100")
	return l
}

// add makes a namespace with loopback up and a veth to the bridge carrying addr.
func (l *lab) add(role, addr string) *netns {
	l.t.Helper()
	n := &netns{lab: l, name: l.prefix + role, addr: addr, port: "p-" + role, fd: -1}
	steps := [][]string{
		{"netns", "add", n.name},
		{"-n", n.name, "link", "set", "lo", "up"},
		// Both ends are made inside namespaces, so the names cannot clash with the machine's
		// interfaces or another lab's.
		{"-n", l.hub, "link", "add", n.port, "type", "veth", "peer", "name", "eth0", "netns", n.name},
		{"-n", l.hub, "link", "set", n.port, "master", "br0", "up"},
		{"-n", n.name, "addr", "add", addr + "/24", "dev", "eth0"},
		{"-n", n.name, "link", "set", "eth0", "up"},
	}
	for _, s := range steps {
		if err := l.ip(s...); err != nil {
			l.t.Skipf("SKIPPED LOUDLY: cannot make a veth link between network namespaces here: %v", err)
		}
	}
	fd, err := unix.Open("/run/netns/"+n.name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		l.t.Fatalf("open namespace %s: %v", n.name, err)
	}
	n.fd = fd
	return n
}

func (l *lab) ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// remove deletes the lab's namespaces; a namespace's veth goes with it. It runs after the
// processes' own cleanups (registered later, run first), and a namespace a process still held
// would only lose its name.
func (l *lab) remove() {
	for _, n := range append(append([]*netns(nil), l.sites...), l.ctl) {
		if n == nil {
			continue
		}
		if n.fd >= 0 {
			unix.Close(n.fd)
		}
		if err := l.ip("netns", "del", n.name); err != nil {
			l.t.Errorf("remove the lab: %v", err)
		}
	}
	if err := l.ip("netns", "del", l.hub); err != nil && !strings.Contains(err.Error(), "No such file") {
		l.t.Errorf("remove the lab: %v", err)
	}
}

// command is argv run inside the namespace: nsenter execs it, so the process the test
// signals is the program itself.
func (n *netns) command(argv ...string) []string {
	return append([]string{"nsenter", "--net=/run/netns/" + n.name, "--"}, argv...)
}

// cut sets the site's bridge port down: the site keeps its own loopback (its node and host
// still talk), and loses everything else. The other end stays up, so nothing inside the site
// is told: packets are simply no longer carried, as when a cable or a switch port dies.
func (n *netns) cut() error { return n.lab.ip("-n", n.lab.hub, "link", "set", n.port, "down") }

// heal sets the site's bridge port up again.
func (n *netns) heal() error { return n.lab.ip("-n", n.lab.hub, "link", "set", n.port, "up") }

// cutLoopback sets the namespace's loopback down: the processes inside it that talk to each
// other (a host to the node beside it, at 127.0.0.1) lose each other, while each keeps its
// link to the bridge; their TCP connections stall, new ones time out.
func (n *netns) cutLoopback() error { return n.lab.ip("-n", n.name, "link", "set", "lo", "down") }

func (n *netns) healLoopback() error { return n.lab.ip("-n", n.name, "link", "set", "lo", "up") }

// dial opens a TCP connection from inside the namespace: the socket is made on an OS thread
// moved into it for the dial, and belongs to the namespace for good whatever thread uses it
// afterwards. The thread is moved back before it is unlocked. A thread that could not be
// moved back is left locked, and the runtime ends it with its goroutine; but an ended thread
// also SIGKILLs every child it forked (Pdeathsig is per thread), so moving back is the rule.
func (n *netns) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	home, err := homeNetns()
	if err != nil {
		return nil, err
	}
	type dialed struct {
		c   net.Conn
		err error
	}
	ch := make(chan dialed, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(n.fd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- dialed{nil, fmt.Errorf("enter namespace %s: %w", n.name, err)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if unix.Setns(home, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- dialed{c, err}
	}()
	select {
	case r := <-ch:
		return r.c, r.err
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.c != nil {
				r.c.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// natsDialer is a nats.CustomDialer that connects from inside the namespace.
type natsDialer struct {
	n       *netns
	timeout time.Duration
}

func (d natsDialer) Dial(network, address string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d.timeout)
	defer cancel()
	return d.n.dial(ctx, network, address)
}

// httpClient is an HTTP client whose connections start inside the namespace.
func (n *netns) httpClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DialContext: n.dial, DisableKeepAlives: true}}
}
