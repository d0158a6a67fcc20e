package sandbox

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Listen is a socket listening inside a jail's network namespace and held by the host (see
// Spec.Listen): a connection the jail makes to Addr reaches the host directly, with no process
// of the jail's own in between to start and to forward.
type Listen struct {
	// Addr is where the socket listens in the jail: an IPv4 address, normally loopback, and a
	// port. The jail's loopback may still be down when the socket is made; it listens anyway.
	Addr netip.AddrPort
	// Ready is handed the listener once it exists, before the jail's command starts, and owns
	// it from then on (closing it is the caller's).
	Ready func(net.Listener)
}

// ErrNoListen: the jail cannot make a socket in its namespace for the host (see ListensIn).
var ErrNoListen = errors.New("sandbox: this jail cannot hold a socket in the jail's network namespace for the host (it needs a hardened bwrap and a host with CAP_SYS_ADMIN, such as root)")

// ListensIn reports whether Start takes a Spec.Listen: a hardened jail (the command waits for
// the host's go-ahead, so the socket is there before it starts) on a host allowed to enter the
// jail's network namespace.
func (j *jailSetup) ListensIn() bool { return j.listensIn }

// canEnterNetns reports whether this process may enter other network namespaces: setns into
// its own one takes the same capability (CAP_SYS_ADMIN) as into a jail's, and changes nothing.
func canEnterNetns() bool {
	self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(self)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return unix.Setns(self, unix.CLONE_NEWNET) == nil
}

// listenIn makes a TCP socket listening on addr (IPv4, see checkSpec) in the network namespace
// of process pid.
func listenIn(pid int, addr netip.AddrPort) (net.Listener, error) {
	ns, err := unix.Open(fmt.Sprintf("/proc/%d/ns/net", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox: listen in the jail: open its network namespace: %w", err)
	}
	defer unix.Close(ns)
	fd, err := socketIn(ns)
	if err != nil {
		return nil, fmt.Errorf("sandbox: listen in the jail: %w", err)
	}
	f := os.NewFile(uintptr(fd), "jail listener")
	defer f.Close()
	// The jail's loopback comes up as bwrap builds the jail, maybe after this: a free bind
	// takes the address before it is local.
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_FREEBIND, 1); err != nil {
		return nil, fmt.Errorf("sandbox: listen in the jail on %s: %w", addr, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: addr.Addr().As4(), Port: int(addr.Port())}); err != nil {
		return nil, fmt.Errorf("sandbox: listen in the jail on %s: %w", addr, err)
	}
	if err := unix.Listen(fd, unix.SOMAXCONN); err != nil {
		return nil, fmt.Errorf("sandbox: listen in the jail on %s: %w", addr, err)
	}
	l, err := net.FileListener(f) // a duplicate of fd, on Go's poller
	if err != nil {
		return nil, fmt.Errorf("sandbox: listen in the jail on %s: %w", addr, err)
	}
	return l, nil
}

// socketIn creates a TCP socket in the network namespace ns. A socket belongs for life to the
// namespace it was created in, so only its creation needs a thread in ns: a thread of its own,
// locked, that goes back to the host's namespace before anything else may run on it.
func socketIn(ns int) (int, error) {
	type made struct {
		fd  int
		err error
	}
	done := make(chan made, 1)
	go func() {
		runtime.LockOSThread()
		self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			done <- made{-1, fmt.Errorf("open the host's network namespace: %w", err)}
			return
		}
		defer unix.Close(self)
		if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- made{-1, fmt.Errorf("enter its network namespace: %w", err)}
			return
		}
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
		if berr := unix.Setns(self, unix.CLONE_NEWNET); berr != nil {
			if err == nil {
				unix.Close(fd)
			}
			done <- made{-1, fmt.Errorf("return to the host's network namespace: %w", berr)}
			// This thread is in the jail's namespace for good, and must run nothing else. Nor
			// may it end: a goroutine that exits locked takes its thread with it, and the
			// kernel kills every bwrap that thread had started (--die-with-parent). So it
			// blocks, a thread lost on a failure that root's setns does not have.
			select {}
		}
		runtime.UnlockOSThread()
		if err != nil {
			err = fmt.Errorf("create a socket in its network namespace: %w", err)
		}
		done <- made{fd, err}
	}()
	m := <-done
	return m.fd, m.err
}
