package egress

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// activity is the shared idle clock of a tunnel's two directions: a stream
// that only flows one way (a model streaming its answer) is not idle.
type activity struct {
	idle time.Duration
	last atomic.Int64 // unix nanoseconds of the last byte moved either way
}

func newActivity(idle time.Duration) *activity {
	a := &activity{idle: idle}
	a.touch()
	return a
}

func (a *activity) touch()              { a.last.Store(time.Now().UnixNano()) }
func (a *activity) deadline() time.Time { return time.Unix(0, a.last.Load()).Add(a.idle) }

// splice copies src to dst until src's EOF (nil error) or any error. With
// act, a read or write that has waited until the tunnel as a whole was idle
// for act.idle fails with a timeout; a read that times out while the other
// direction was busy waits on.
func splice(dst, src net.Conn, buf []byte, act *activity) (int64, error) {
	var total int64
	for {
		if act != nil {
			if err := src.SetReadDeadline(act.deadline()); err != nil {
				return total, err
			}
		}
		n, err := src.Read(buf)
		if n > 0 {
			if act != nil {
				act.touch()
				if werr := dst.SetWriteDeadline(act.deadline()); werr != nil {
					return total, werr
				}
			}
			w, werr := dst.Write(buf[:n])
			total += int64(w)
			if werr != nil {
				return total, werr
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			return total, nil
		case act != nil && errors.Is(err, os.ErrDeadlineExceeded) && time.Now().Before(act.deadline()):
			// The other direction moved meanwhile.
		default:
			return total, err
		}
	}
}

type closeWriter interface{ CloseWrite() error }

// join copies a to b and b to a until both directions are done, then closes
// both. An EOF on one side becomes a half-close (FIN) of the other, so
// protocols that send their last request and then read the answer work; an
// error on either side ends both directions at once.
func join(a, b net.Conn, act *activity) (aToB, bToA int64) {
	var wg sync.WaitGroup
	var once sync.Once
	abort := func() {
		once.Do(func() {
			a.Close()
			b.Close()
		})
	}
	pump := func(dst, src net.Conn, n *int64) {
		buf := make([]byte, copyBufSize)
		var err error
		*n, err = splice(dst, src, buf, act)
		if err == nil {
			if cw, ok := dst.(closeWriter); ok && cw.CloseWrite() == nil {
				return
			}
		}
		abort()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		pump(b, a, &aToB)
	}()
	pump(a, b, &bToA)
	wg.Wait()
	abort()
	return aToB, bToA
}

// limitListener accepts at most n connections at once; a connection's slot
// is freed when it is closed (hijacked ones included).
type limitListener struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func newLimitListener(l net.Listener, n int) *limitListener {
	return &limitListener{Listener: l, sem: make(chan struct{}, n), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type limitConn struct {
	net.Conn
	release func()
	once    sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// CloseWrite keeps half-close working through the wrapper.
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(closeWriter); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// idleConn fails a read or write that waits longer than idle; it guards
// the upstream side of plain-HTTP forwarding, where no tunnel clock runs.
type idleConn struct {
	net.Conn
	idle time.Duration
}

func (c *idleConn) Read(b []byte) (int, error) {
	if err := c.Conn.SetReadDeadline(time.Now().Add(c.idle)); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *idleConn) Write(b []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.idle)); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}
