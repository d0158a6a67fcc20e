// Package anthropictest is a small local server that speaks the Anthropic Messages API
// (streaming and not), for end-to-end tests that run real agents — Claude Code through the
// Claude Agent SDK — without reaching the internet. It answers every request with text, and
// records what it was sent so tests can check, for instance, that a resumed session replays its
// earlier turns.
package anthropictest

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agenthost/host/internal/llmtest"
)

// Request is one call the server received.
type Request struct{ llmtest.Request }

// Messages returns the request's messages.
func (r Request) Messages() []any {
	m, _ := r.Body["messages"].([]any)
	return m
}

// Text is every text the request carries (system prompt and messages), concatenated; tests
// search it for earlier turns.
func (r Request) Text() string { return llmtest.Text(r.Body["system"], r.Body["messages"]) }

// LastUserText is the last text block of the last user message: what the user typed, without
// the context blocks an agent puts before it.
func (r Request) LastUserText() string {
	msgs := r.Messages()
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
				if block, _ := c[j].(map[string]any); block["type"] == "text" {
					t, _ := block["text"].(string)
					return strings.TrimSpace(t)
				}
			}
		}
		return ""
	}
	return ""
}

// Reply chooses the text answering a request.
type Reply func(Request) string

// Server is a running fake Messages API.
type Server struct {
	URL string

	srv   *http.Server
	reply Reply
	ids   atomic.Int64
	rec   llmtest.Recorder
}

// Start serves on a free loopback port. reply may be nil: the default answers
// "You said: <last user text>".
func Start(reply Reply) (*Server, error) {
	if reply == nil {
		reply = func(r Request) string { return "You said: " + r.LastUserText() }
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the fake Anthropic API: %w", err)
	}
	s := &Server{URL: "http://" + l.Addr().String(), reply: reply}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", s.messages)
	mux.HandleFunc("POST /v1/messages/count_tokens", func(w http.ResponseWriter, r *http.Request) {
		s.record(r)
		writeJSON(w, map[string]any{"input_tokens": 42})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.record(r)
		http.Error(w, `{"type":"error","error":{"type":"not_found_error","message":"not served by the test server"}}`, http.StatusNotFound)
	})
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go s.srv.Serve(l)
	return s, nil
}

// Close stops the server.
func (s *Server) Close() error { return s.srv.Close() }

// Requests returns what the server has received so far.
func (s *Server) Requests() []Request {
	var out []Request
	for _, r := range s.rec.Requests() {
		out = append(out, Request{r})
	}
	return out
}

func (s *Server) record(r *http.Request) Request { return Request{s.rec.Record(r)} }

func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	req := s.record(r)
	if r.Header.Get("X-Api-Key") == "" && r.Header.Get("Authorization") == "" {
		w.WriteHeader(http.StatusUnauthorized)
		writeJSON(w, map[string]any{"type": "error", "error": map[string]any{"type": "authentication_error", "message": "no API key"}})
		return
	}
	text := s.reply(req)
	model, _ := req.Body["model"].(string)
	id := fmt.Sprintf("msg_test_%d", s.ids.Add(1))
	inTokens, outTokens := 10+len(req.Text())/4, 1+len(text)/4
	if stream, _ := req.Body["stream"].(bool); !stream {
		writeJSON(w, map[string]any{
			"id": id, "type": "message", "role": "assistant", "model": model,
			"content":     []any{map[string]any{"type": "text", "text": text}},
			"stop_reason": "end_turn", "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": inTokens, "output_tokens": outTokens},
		})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	flusher, _ := w.(http.Flusher)
	event := func(name string, data map[string]any) {
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": inTokens, "output_tokens": 1},
	}})
	event("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
	// Several deltas, as a real stream sends them.
	for _, part := range chunks(text, 16) {
		event("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": part}})
	}
	event("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	event("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": outTokens}})
	event("message_stop", map[string]any{"type": "message_stop"})
}

// chunks splits s into pieces of about n runes.
func chunks(s string, n int) []string {
	var out []string
	r := []rune(s)
	for len(r) > n {
		out = append(out, string(r[:n]))
		r = r[n:]
	}
	return append(out, string(r))
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}
