package cluster_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// proxy forwards TCP connections from a loopback port to a target, cutting each direction's
// byte stream into units (NATS protocol operations, or lines for HTTP) and showing every unit
// to a hook before forwarding it. When the hook says "hold", that unit is never forwarded and
// the connection freezes in both directions: for the process on the client side, the world
// stopped right there. The test then kills that process, which is how a SIGKILL is placed at
// an exact point (a delivered message before its run starts, the ack after the outputs, an
// upload in flight).
type proxy struct {
	t      testing.TB
	ln     net.Listener
	target string
	split  func(*bufio.Reader) ([]byte, error)
	hook   func(toServer bool, unit []byte) bool
	held   chan []byte
	armed  atomic.Bool
}

func startProxy(t testing.TB, target string, split func(*bufio.Reader) ([]byte, error), hook func(toServer bool, unit []byte) bool) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, ln: ln, target: target, split: split, hook: hook, held: make(chan []byte, 1)}
	p.armed.Store(true)
	t.Cleanup(func() { ln.Close() })
	go p.accept()
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

func (p *proxy) serve(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	var frozen atomic.Bool
	var once sync.Once
	closeBoth := func() { once.Do(func() { client.Close(); server.Close() }) }
	pipe := func(from, to net.Conn, toServer bool) {
		r := bufio.NewReaderSize(from, 64<<10)
		for {
			unit, err := p.split(r)
			if len(unit) > 0 && !frozen.Load() {
				if p.armed.Load() && p.hook != nil && p.hook(toServer, unit) && p.armed.CompareAndSwap(true, false) {
					frozen.Store(true)
					p.held <- append([]byte(nil), unit...)
				} else if _, werr := to.Write(unit); werr != nil {
					err = werr
				}
			}
			if err != nil {
				// Frozen or not, a connection that one side dropped is over.
				closeBoth()
				return
			}
		}
	}
	go pipe(client, server, true)
	go pipe(server, client, false)
}

// splitLines cuts a stream into lines (or 64 KiB pieces of a long line): good enough to spot
// HTTP request lines.
func splitLines(r *bufio.Reader) ([]byte, error) {
	b, err := r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		err = nil
	}
	return append([]byte(nil), b...), err
}

// splitNATS cuts a NATS client protocol stream into whole operations: a control line, plus
// its payload for MSG, HMSG, PUB and HPUB (whose last field is the total payload size).
func splitNATS(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadBytes('\n')
	if err != nil {
		return line, err
	}
	op, _ := natsOp(line)
	switch op {
	case "MSG", "HMSG", "PUB", "HPUB":
		f := bytes.Fields(line)
		n, perr := strconv.Atoi(string(f[len(f)-1]))
		if perr != nil {
			return line, fmt.Errorf("bad NATS control line %q", line)
		}
		payload := make([]byte, n+2)
		if _, err := io.ReadFull(r, payload); err != nil {
			return append(line, payload...), err
		}
		return append(line, payload...), nil
	}
	return line, nil
}

// natsOp returns the operation and fields of a unit's control line.
func natsOp(unit []byte) (string, [][]byte) {
	end := bytes.IndexByte(unit, '\n')
	if end < 0 {
		end = len(unit)
	}
	f := bytes.Fields(unit[:end])
	if len(f) == 0 {
		return "", nil
	}
	return string(bytes.ToUpper(f[0])), f
}

// natsMsg splits a MSG/HMSG/PUB/HPUB unit into subject, reply and body (headers dropped).
func natsMsg(unit []byte) (op, subject, reply string, body []byte, ok bool) {
	op, f := natsOp(unit)
	var hdr int
	switch op {
	case "PUB": // PUB subject [reply] size
		subject = string(f[1])
		if len(f) == 4 {
			reply = string(f[2])
		}
	case "HPUB": // HPUB subject [reply] hdr total
		subject = string(f[1])
		if len(f) == 5 {
			reply = string(f[2])
		}
		hdr, _ = strconv.Atoi(string(f[len(f)-2]))
	case "MSG": // MSG subject sid [reply] size
		subject = string(f[1])
		if len(f) == 5 {
			reply = string(f[3])
		}
	case "HMSG": // HMSG subject sid [reply] hdr total
		subject = string(f[1])
		if len(f) == 6 {
			reply = string(f[3])
		}
		hdr, _ = strconv.Atoi(string(f[len(f)-2]))
	default:
		return op, "", "", nil, false
	}
	start := bytes.IndexByte(unit, '\n') + 1
	payload := unit[start : len(unit)-2]
	if hdr <= len(payload) {
		body = payload[hdr:]
	}
	return op, subject, reply, body, true
}
