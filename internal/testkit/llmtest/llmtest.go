// Package llmtest is what the local stand-ins for model APIs (anthropictest, openaitest) share,
// so that each of them is only its wire protocol: serving on a loopback port, recording the
// requests received, reading the text out of them, and writing JSON and server-sent events.
package llmtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Request is one call a fake API received.
type Request struct {
	Method string
	Path   string
	Header http.Header
	Body   map[string]any // nil when the body is not JSON
}

// Recorder keeps the requests a server received; safe for concurrent use.
type Recorder struct {
	mu   sync.Mutex
	reqs []Request
}

// Record reads r's body (up to 64 MiB) and keeps the request.
func (rec *Recorder) Record(r *http.Request) Request {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	req := Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone()}
	_ = json.Unmarshal(body, &req.Body)
	rec.mu.Lock()
	rec.reqs = append(rec.reqs, req)
	rec.mu.Unlock()
	return req
}

// Requests returns what was recorded so far.
func (rec *Recorder) Requests() []Request {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]Request(nil), rec.reqs...)
}

// Text concatenates every text in vs, one per line: strings, and the "text" and "content"
// fields of objects at any depth — the shape both APIs give messages and their parts.
func Text(vs ...any) string {
	var b strings.Builder
	for _, v := range vs {
		collect(&b, v)
	}
	return b.String()
}

func collect(b *strings.Builder, v any) {
	switch v := v.(type) {
	case string:
		b.WriteString(v)
		b.WriteByte('\n')
	case []any:
		for _, e := range v {
			collect(b, e)
		}
	case map[string]any:
		if t, ok := v["text"].(string); ok {
			collect(b, t)
		}
		if c, ok := v["content"]; ok {
			collect(b, c)
		}
	}
}

// LastUserText is the last text part of the last user message in msgs: what the user typed,
// without the context an agent puts in earlier messages or parts. A part is text when its
// "type" is one of textTypes.
func LastUserText(msgs []any, textTypes ...string) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		m, _ := msgs[i].(map[string]any)
		if m["role"] != "user" {
			continue
		}
		switch c := m["content"].(type) {
		case string:
			return strings.TrimSpace(c)
		case []any:
			for j := len(c) - 1; j >= 0; j-- {
				if part, _ := c[j].(map[string]any); slices.Contains(textTypes, fmt.Sprint(part["type"])) {
					t, _ := part["text"].(string)
					return strings.TrimSpace(t)
				}
			}
		}
		return ""
	}
	return ""
}

// Handler answers one request of a fake API; req is r as recorded, body read, wrapped in the
// fake's own request type.
type Handler[R any] func(w http.ResponseWriter, r *http.Request, req R)

// Server is the HTTP side of a fake API: a server on a free loopback port that records every
// request before its handler sees it.
type Server[R any] struct {
	URL string

	srv  *http.Server
	tls  *http.Server // ServeTLS's, once started
	rec  Recorder
	wrap func(Request) R
}

// Serve starts serving routes (net/http patterns) on a free loopback port. api names the API in
// errors; wrap turns a recorded request into the fake's own request type.
func Serve[R any](api string, wrap func(Request) R, routes map[string]Handler[R]) (*Server[R], error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the fake %s API: %w", api, err)
	}
	s := &Server[R]{URL: "http://" + l.Addr().String(), wrap: wrap}
	mux := http.NewServeMux()
	for pattern, h := range routes {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			h(w, r, wrap(s.rec.Record(r)))
		})
	}
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go s.srv.Serve(l)
	return s, nil
}

// Close stops the server.
func (s *Server[R]) Close() error {
	if s.tls != nil {
		s.tls.Close()
	}
	return s.srv.Close()
}

// Requests returns what the server has received so far.
func (s *Server[R]) Requests() []R {
	var out []R
	for _, r := range s.rec.Requests() {
		out = append(out, s.wrap(r))
	}
	return out
}

// WriteJSON writes v as the JSON body of a response with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// EventStream writes server-sent events, each flushed as it is written, as a streaming model
// API does.
type EventStream struct {
	w       http.ResponseWriter
	flusher http.Flusher
}

// NewEventStream starts a text/event-stream response.
func NewEventStream(w http.ResponseWriter) *EventStream {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	f, _ := w.(http.Flusher)
	return &EventStream{w: w, flusher: f}
}

// Send writes one event called name with data as its JSON.
func (e *EventStream) Send(name string, data any) {
	b, _ := json.Marshal(data)
	fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", name, b)
	if e.flusher != nil {
		e.flusher.Flush()
	}
}

// Chunks splits s into pieces of about n runes, the deltas of a stream: several, as a real
// stream sends them.
func Chunks(s string, n int) []string {
	var out []string
	r := []rune(s)
	for len(r) > n {
		out = append(out, string(r[:n]))
		r = r[n:]
	}
	return append(out, string(r))
}

// Post sends body as JSON to url with headers, as a client of a fake API would, and returns the
// status and the events' data in order; a response that is not a stream is one JSON body.
// Every event's name must be its data's "type", as both APIs send them.
func Post(t testing.TB, url string, headers map[string]string, body any) (int, []map[string]any) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest("POST", url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		var v map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, []map[string]any{v}
	}
	var events []map[string]any
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	var name string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var v map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &v); err != nil {
				t.Fatalf("data %q: %v", line, err)
			}
			if v["type"] != name {
				t.Fatalf("event %q carries type %v", name, v["type"])
			}
			events = append(events, v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, events
}

// Types lists the events' types.
func Types(events []map[string]any) []string {
	var out []string
	for _, e := range events {
		t, _ := e["type"].(string)
		out = append(out, t)
	}
	return out
}
