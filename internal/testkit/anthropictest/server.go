// Package anthropictest is a small local server that speaks the Anthropic Messages API
// (streaming and not), for end-to-end tests that run real agents — Claude Code through the
// Claude Agent SDK — without reaching the internet. It answers every request with text, and
// records what it was sent so tests can check, for instance, that a resumed session replays its
// earlier turns.
package anthropictest

import (
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/agenthost/host/internal/testkit/llmtest"
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
func (r Request) LastUserText() string { return llmtest.LastUserText(r.Messages(), "text") }

// Reply chooses the text answering a request.
type Reply func(Request) string

// Server is a running fake Messages API.
type Server struct {
	*llmtest.Server[Request]

	reply   Reply
	respond Responder // when set (StartResponder), in place of reply
	ids     atomic.Int64
}

// Start serves on a free loopback port. reply may be nil: the default answers
// "You said: <last user text>".
func Start(reply Reply) (*Server, error) {
	if reply == nil {
		reply = func(r Request) string { return "You said: " + r.LastUserText() }
	}
	s := &Server{reply: reply}
	var err error
	s.Server, err = llmtest.Serve("Anthropic", func(r llmtest.Request) Request { return Request{r} }, map[string]llmtest.Handler[Request]{
		"POST /v1/messages": s.messages,
		"POST /v1/messages/count_tokens": func(w http.ResponseWriter, _ *http.Request, _ Request) {
			llmtest.WriteJSON(w, http.StatusOK, map[string]any{"input_tokens": 42})
		},
		"/": func(w http.ResponseWriter, _ *http.Request, _ Request) {
			llmtest.WriteJSON(w, http.StatusNotFound, errorBody("not_found_error", "not served by the test server"))
		},
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

func errorBody(typ, msg string) map[string]any {
	return map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}}
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request, req Request) {
	if r.Header.Get("X-Api-Key") == "" && r.Header.Get("Authorization") == "" {
		llmtest.WriteJSON(w, http.StatusUnauthorized, errorBody("authentication_error", "no API key"))
		return
	}
	var text string
	if s.respond != nil {
		a := s.respond(req)
		if a.ToolUse != nil {
			s.toolUse(w, req, a.ToolUse)
			return
		}
		text = a.Text
	} else {
		text = s.reply(req)
	}
	model, _ := req.Body["model"].(string)
	id := fmt.Sprintf("msg_test_%d", s.ids.Add(1))
	inTokens, outTokens := 10+len(req.Text())/4, 1+len(text)/4
	if stream, _ := req.Body["stream"].(bool); !stream {
		llmtest.WriteJSON(w, http.StatusOK, map[string]any{
			"id": id, "type": "message", "role": "assistant", "model": model,
			"content":     []any{map[string]any{"type": "text", "text": text}},
			"stop_reason": "end_turn", "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": inTokens, "output_tokens": outTokens},
		})
		return
	}
	stream := llmtest.NewEventStream(w)
	event := func(data map[string]any) { stream.Send(data["type"].(string), data) }
	event(map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": inTokens, "output_tokens": 1},
	}})
	event(map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
	for _, part := range llmtest.Chunks(text, 16) {
		event(map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": part}})
	}
	event(map[string]any{"type": "content_block_stop", "index": 0})
	event(map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": outTokens}})
	event(map[string]any{"type": "message_stop"})
}
