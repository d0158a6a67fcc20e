package runner

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agenthost/host/internal/runtimes"
	"github.com/agenthost/host/internal/sandbox"
)

// keptStream is a kept jail's stdout or stderr: it passes what the runtime prints to the
// message being served, up to and with its end line, and drops what comes between messages
// (a thread of an earlier message that still prints). On stdout it also hears the ready line
// that follows a message's end.
type keptStream struct {
	mu    sync.Mutex
	dst   io.Writer
	run   *keptRun // the message being served, until its end line here
	last  *keptRun // the message whose end line went by, until the ready line (stdout)
	ready bool     // this is stdout, where the ready line comes
	tail  []byte   // the end of the current line, for the markers
}

// keptTail is how much of a line's end is kept to find a marker at it.
const keptTail = 64

// markerStart is the first byte of the end and ready markers.
const markerStart = 0x1e

func (s *keptStream) attach(dst io.Writer, run *keptRun, stdout bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dst, s.run, s.ready, s.last = dst, run, stdout, nil
}

func (s *keptStream) Write(p []byte) (int, error) {
	n := len(p)
	s.mu.Lock()
	defer s.mu.Unlock()
	if bytes.IndexByte(p, markerStart) < 0 && bytes.IndexByte(s.tail, markerStart) < 0 {
		// No marker can end in p (each starts with the record separator): all of it is the
		// message's, in one write, as a job's flood of output comes.
		if s.dst != nil {
			_, _ = s.dst.Write(p)
		}
		if i := bytes.LastIndexByte(p, '\n'); i >= 0 {
			s.tail, p = s.tail[:0], p[i+1:]
		}
		s.tail = append(s.tail, p[max(0, len(p)-keptTail):]...)
		s.tail = s.tail[max(0, len(s.tail)-keptTail):]
		return n, nil
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i+1]
		}
		if s.dst != nil {
			_, _ = s.dst.Write(chunk)
		}
		p = p[len(chunk):]
		if i < 0 {
			s.tail = append(s.tail, chunk...)
			if len(s.tail) > keptTail {
				s.tail = append(s.tail[:0], s.tail[len(s.tail)-keptTail:]...)
			}
			break
		}
		line := append(s.tail, chunk[:len(chunk)-1]...)
		s.tail = s.tail[:0]
		s.line(line)
	}
	return n, nil
}

// line looks at a whole line for the end and ready markers.
func (s *keptStream) line(line []byte) {
	if _, code, ok := runtimes.ParseEnd(line); ok && s.run != nil {
		run := s.run
		s.dst, s.run = nil, nil
		if s.ready {
			s.last = run
		}
		run.saw(code)
		return
	}
	if _, ok := runtimes.ParseReady(line); ok && s.last != nil {
		close(s.last.readyNext)
		s.last = nil
	}
}

// keptRun is one message served by a kept jail: its sandbox.Handle.
type keptRun struct {
	kj        *keptJail
	t0        time.Time
	seen      int
	code      int
	ended     chan int      // the code, once both end lines went by
	readyNext chan struct{} // closed on the ready line after its end
	timedOut  atomic.Bool
	done      chan struct{} // closed once res is set
	res       *sandbox.Result
	byEnd     bool // res is the end lines'
}

// saw counts an end line; the second (one per stream) ends the message. Under a stream's mu:
// the streams are two, so it has its own.
func (r *keptRun) saw(code int) {
	keptRunMu.Lock()
	defer keptRunMu.Unlock()
	r.seen++
	if r.seen == 1 {
		r.code = code
		return
	}
	if r.seen == 2 {
		r.ended <- r.code
	}
}

// keptRunMu guards keptRun.seen: two streams count into it, rarely at once.
var keptRunMu sync.Mutex

// wait sets the message's result: its end lines, or the jail's end.
func (r *keptRun) wait(stop func() bool, timer *time.Timer) {
	defer close(r.done)
	select {
	case code := <-r.ended:
		r.res = &sandbox.Result{ExitCode: code, Duration: time.Since(r.t0)}
		r.byEnd = true
	case <-r.kj.exited:
		r.res = r.exitResult()
	}
	stop()
	if timer != nil {
		timer.Stop()
	}
}

// exitResult is the result of a message whose jail ended before its end lines.
func (r *keptRun) exitResult() *sandbox.Result {
	kj := r.kj
	if kj.res == nil {
		// The jail never started: nothing of the message reached it.
		return &sandbox.Result{Err: errKeptGone}
	}
	res := *kj.res
	if res.Err != nil {
		return &res
	}
	res.Duration = time.Since(r.t0)
	if r.timedOut.Load() || (res.Canceled && errors.Is(context.Cause(kj.ctx), errKeptTimeout)) {
		res.Canceled, res.TimedOut, res.Limit = false, true, sandbox.LimitTimeout
	}
	return &res
}

// clean reports whether the message ended on its end lines with 0, within its time: its jail
// may serve another.
func (r *keptRun) clean() bool {
	select {
	case <-r.done:
	default:
		return false
	}
	return r.res != nil && r.res.Err == nil && !r.res.TimedOut && !r.res.Canceled && r.res.Limit == "" && r.res.ExitCode == 0 && r.byEnd
}

// Wait implements sandbox.Handle.
func (r *keptRun) Wait(ctx context.Context) <-chan *sandbox.Result {
	c := make(chan *sandbox.Result, 1)
	go func() {
		defer close(c)
		select {
		case <-r.done:
			c <- r.res
		case <-ctx.Done():
		}
	}()
	return c
}

// End implements sandbox.Handle: the end lines are heard by the jail's streams already.
func (r *keptRun) End(int) {}

// Kill implements sandbox.Handle: the jail ends with its message.
func (r *keptRun) Kill() { r.kj.cancel(errWarmStopped) }

// Destroy implements sandbox.Handle: the message's release (keptMsg) says what becomes of
// the jail.
func (r *keptRun) Destroy() {}

// netConn is a connection the mux hands on.
type netConn = net.Conn

// muxListener is one message's listener on a kept jail's egress mux.
type muxListener struct {
	m      *egressMux
	conns  chan netConn
	closed chan struct{}
	once   sync.Once
}

// deliver hands c to the message's proxy; false when the listener is closed.
func (l *muxListener) deliver(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.closed:
		return false
	}
}

// Accept implements net.Listener.
func (l *muxListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener: the message's proxy stops taking connections; the jail's
// listener stays, refusing until the next message.
func (l *muxListener) Close() error {
	l.once.Do(func() {
		l.m.mu.Lock()
		if l.m.cur == l {
			l.m.cur = nil
		}
		l.m.mu.Unlock()
		close(l.closed)
		for {
			select {
			case c := <-l.conns:
				c.Close()
			default:
				return
			}
		}
	})
	return nil
}

// Addr implements net.Listener.
func (l *muxListener) Addr() net.Addr { return l.m.l.Addr() }
