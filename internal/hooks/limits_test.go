package hooks

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/agenthost/host/internal/testkit/natstest"
)

// serveHooks serves h as the host does, on a real listener (read deadlines need a real conn).
func serveHooks(t *testing.T, h *Handler) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("POST /hooks/{source}", h)
	web := httptest.NewServer(mux)
	t.Cleanup(web.Close)
	return strings.TrimPrefix(web.URL, "http://")
}

// stall opens a delivery whose headers promise a body that never comes.
func stall(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST /hooks/public HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"partial\":")
	return c, bufio.NewReader(c)
}

// The attack: a client sends headers and then stalls its body. Before, the connection stayed
// open for good; now it gets 408 and is closed once the body timeout passes.
func TestStalledBodyIsCutOff(t *testing.T) {
	h := New(nil, nil, zaptest.NewLogger(t), Config{Sources: []Source{{Name: "public", Auth: Open}}, BodyTimeout: 300 * time.Millisecond})
	c, r := stall(t, serveHooks(t, h))
	// A safety net only: the handler's own timeout is what must end the request.
	c.SetReadDeadline(time.Now().Add(2 * time.Minute))
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("the stalled delivery got no answer: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("stalled body: status %d, want 408", resp.StatusCode)
	}
	// The server closes the connection: reading on ends at EOF, not at the safety net.
	if rest, err := io.ReadAll(r); err != nil {
		t.Fatalf("the connection of a stalled delivery was kept open (%v; read %q)", err, rest)
	}
}

// The attack: many clients stall at once to hold the host's connections. Past the cap, a
// delivery is turned away at once with 503 and Retry-After instead of queuing behind them.
func TestConcurrentDeliveriesAreCapped(t *testing.T) {
	h := New(nil, nil, zaptest.NewLogger(t), Config{Sources: []Source{{Name: "public", Auth: Open}}, MaxConcurrent: 2, BodyTimeout: time.Minute})
	addr := serveHooks(t, h)
	for range 2 {
		stall(t, addr)
	}
	// Wait until the handler holds both stalled deliveries (the event, not a time).
	natstest.Eventually(t, "two stalled deliveries hold the handler's slots", func() bool { return len(h.slots) == 2 })
	req, _ := http.NewRequest("POST", "http://"+addr+"/hooks/public", strings.NewReader(`{}`))
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a delivery past the cap: status %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}
