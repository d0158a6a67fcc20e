// Package llmtest is what the local stand-ins for model APIs (anthropictest, openaitest) share:
// recording the requests they receive and reading the text out of them.
package llmtest

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
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
