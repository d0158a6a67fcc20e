package jailinit

import (
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// acceptLoop hands every connection on the listening socket lfd to
// forwardConn, until lfd is shut down. It accepts with a plain blocking
// accept4 rather than through Go's network poller, so that a job that makes
// no connection never pays for setting the poller up: about half a
// millisecond of the init's start.
func acceptLoop(lfd int, socket string, stderr io.Writer) {
	backoff := 5 * time.Millisecond
	for {
		nfd, _, err := unix.Accept4(lfd, unix.SOCK_CLOEXEC)
		switch {
		case err == unix.EINTR || err == unix.ECONNABORTED:
			continue
		case err == unix.EINVAL || err == unix.EBADF:
			return // shut down
		case err != nil:
			// Out of file descriptors, most likely: the job's own doing;
			// wait rather than spin.
			fmt.Fprintf(stderr, "jailinit: accept: %v\n", err)
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		f := os.NewFile(uintptr(nfd), "job connection")
		c, err := net.FileConn(f) // a duplicate of nfd, on the poller
		f.Close()
		if err != nil {
			fmt.Fprintf(stderr, "jailinit: accept: %v\n", err)
			continue
		}
		go forwardConn(c, socket)
	}
}

// forwardConn carries one job connection to the proxy. Idle and size limits
// are the proxy's: it closes its side, and the close travels back here.
func forwardConn(c net.Conn, socket string) {
	up, err := net.DialTimeout("unix", socket, forwardDialWait)
	if err != nil {
		// The job's client speaks HTTP to us: an HTTP answer is what it
		// can show its user.
		msg := fmt.Sprintf("egress: the host's egress proxy is unreachable: %v\n", err)
		fmt.Fprintf(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(msg), msg)
		c.Close()
		return
	}
	pipe(c, up)
}

type halfCloser interface{ CloseWrite() error }

// pipe copies each way until both ways are done, then closes both. An EOF
// one way becomes a half-close (FIN) of the other, so that a client that
// sends its last bytes and then reads the answer gets it; a failure either
// way ends both at once, so that neither side waits on a dead peer.
func pipe(a, b net.Conn) {
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			a.Close()
			b.Close()
		})
	}
	oneWay := func(dst, src net.Conn) {
		_, err := io.Copy(dst, src)
		if hc, ok := dst.(halfCloser); err == nil && ok && hc.CloseWrite() == nil {
			return
		}
		closeBoth()
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		oneWay(b, a)
	}()
	oneWay(a, b)
	wg.Wait()
	closeBoth()
}
