// Package openaitest is a small local server that speaks enough of the OpenAI Responses API for
// end-to-end tests that run real agents — the Codex CLI — without reaching the internet:
// POST /v1/responses, streamed as server-sent events (or as one JSON object when the request
// does not ask for a stream), and GET /v1/models. It answers with text, or with a tool call when
// the test's Reply asks for one, and records what it was sent so tests can check, for instance,
// that a resumed session replays its earlier turns, or what a tool call's output was.
//
// A stream carries the events the real API sends for one output item: response.created,
// response.in_progress, response.output_item.added, then for text response.content_part.added,
// response.output_text.delta (several), response.output_text.done and
// response.content_part.done, or for a tool call its input or arguments deltas and done event,
// then response.output_item.done and response.completed with usage. Of these, Codex 0.169
// needs only response.output_item.done (without it the final message is empty) and
// response.completed with the response's id (without it Codex reports "stream disconnected
// before completion" and retries); the others are sent because real clients may use them.
//
// Point Codex at it with a custom model provider, which talks plain HTTP:
//
//	codex exec -c model_provider=test \
//	  -c 'model_providers.test={name="test",base_url="<BaseURL>",env_key="OPENAI_API_KEY",wire_api="responses"}'
//
// Codex's built-in OpenAI provider tries a WebSocket (GET /v1/responses with Upgrade) first,
// which this server does not speak: it falls back to HTTP only after several seconds of retries.
package openaitest

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agenthost/host/internal/testkit/llmtest"
)

// Request is one call the server received.
type Request struct{ llmtest.Request }

// Input returns the request's input items (the conversation so far).
func (r Request) Input() []any {
	switch in := r.Body["input"].(type) {
	case []any:
		return in
	case string:
		return []any{map[string]any{"type": "message", "role": "user", "content": in}}
	}
	return nil
}

// Text is every text the request carries (instructions and input items), concatenated; tests
// search it for earlier turns.
func (r Request) Text() string { return llmtest.Text(r.Body["instructions"], r.Input()) }

// LastUserText is the last text part of the last user message: what the user typed (Codex puts
// its context — AGENTS.md, the environment — in earlier messages or parts).
func (r Request) LastUserText() string { return llmtest.LastUserText(r.Input(), "input_text", "text") }

// ToolOutput is the result of a tool call, as the client sends it back in its next request.
type ToolOutput struct {
	CallID string
	Output string // the output's text (its text parts, one a line)
}

// ToolOutputs returns the tool results the request carries, oldest first.
func (r Request) ToolOutputs() []ToolOutput { return toolOutputs(r.Input()) }

// TurnToolOutputs returns the tool results that came after the last user message: those of
// calls made in the turn being answered, not in earlier turns a resumed session replays.
func (r Request) TurnToolOutputs() []ToolOutput {
	in := r.Input()
	for i := len(in) - 1; i >= 0; i-- {
		if m, _ := in[i].(map[string]any); m["role"] == "user" {
			return toolOutputs(in[i+1:])
		}
	}
	return toolOutputs(in)
}

func toolOutputs(items []any) []ToolOutput {
	var out []ToolOutput
	for _, it := range items {
		m, _ := it.(map[string]any)
		switch m["type"] {
		case "function_call_output", "custom_tool_call_output":
			id, _ := m["call_id"].(string)
			text, ok := m["output"].(string)
			if !ok {
				text = strings.TrimSuffix(llmtest.Text(m["output"]), "\n")
			}
			out = append(out, ToolOutput{CallID: id, Output: text})
		}
	}
	return out
}

// Answer is what the fake model answers: text, or a call of one of the client's tools, whose
// result comes back in the client's next request.
type Answer struct {
	Text string
	Call *Call
}

// Call is a call of one of the tools the client offered. A custom (freeform) tool — Codex's
// `exec`, which runs JavaScript that can call tools.exec_command — takes Input as it is; a
// function tool takes Input as its JSON arguments.
type Call struct {
	Name   string
	Custom bool
	Input  string
}

// Reply chooses the answer to a request.
type Reply func(Request) Answer

// Server is a running fake Responses API. URL is its root; BaseURL, ending in /v1, is what
// clients take as their base URL.
type Server struct {
	*llmtest.Server[Request]

	reply Reply
	ids   atomic.Int64
}

// Start serves on a free loopback port. reply may be nil: the default answers
// "You said: <last user text>".
func Start(reply Reply) (*Server, error) {
	if reply == nil {
		reply = func(r Request) Answer { return Answer{Text: "You said: " + r.LastUserText()} }
	}
	s := &Server{reply: reply}
	var err error
	s.Server, err = llmtest.Serve("OpenAI", func(r llmtest.Request) Request { return Request{r} }, map[string]llmtest.Handler[Request]{
		"POST /v1/responses": s.responses,
		"GET /v1/models": func(w http.ResponseWriter, _ *http.Request, _ Request) {
			llmtest.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{}})
		},
		"/": func(w http.ResponseWriter, _ *http.Request, _ Request) {
			llmtest.WriteJSON(w, http.StatusNotFound, errorBody("not_found", "not served by the test server"))
		},
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// BaseURL is the API's base URL, ending in /v1, as OpenAI clients take it.
func (s *Server) BaseURL() string { return s.URL + "/v1" }

func errorBody(typ, msg string) map[string]any {
	return map[string]any{"error": map[string]any{"type": typ, "code": typ, "message": msg, "param": nil}}
}

func (s *Server) responses(w http.ResponseWriter, r *http.Request, req Request) {
	if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
		llmtest.WriteJSON(w, http.StatusUnauthorized, errorBody("invalid_api_key", "no API key"))
		return
	}
	if req.Body == nil {
		llmtest.WriteJSON(w, http.StatusBadRequest, errorBody("invalid_request_error",
			"the body is not a JSON object (Content-Encoding: "+r.Header.Get("Content-Encoding")+")"))
		return
	}
	answer := s.reply(req)
	model, _ := req.Body["model"].(string)
	n := s.ids.Add(1)
	respID := fmt.Sprintf("resp_test_%d", n)
	outLen := len(answer.Text)
	if answer.Call != nil {
		outLen = len(answer.Call.Input)
	}
	inTokens, outTokens := 10+len(req.Text())/4, 1+outLen/4
	usage := map[string]any{
		"input_tokens": inTokens, "input_tokens_details": map[string]any{"cached_tokens": 0},
		"output_tokens": outTokens, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
		"total_tokens": inTokens + outTokens,
	}
	response := func(status string, output []any, usage any) map[string]any {
		return map[string]any{
			"id": respID, "object": "response", "created_at": time.Now().Unix(), "status": status,
			"model": model, "output": output, "usage": usage, "error": nil, "incomplete_details": nil,
		}
	}
	added, done := outputItem(answer, n)
	if stream, _ := req.Body["stream"].(bool); !stream {
		llmtest.WriteJSON(w, http.StatusOK, response("completed", []any{done}, usage))
		return
	}
	stream := llmtest.NewEventStream(w)
	seq := 0
	event := func(data map[string]any) {
		data["sequence_number"] = seq
		seq++
		stream.Send(data["type"].(string), data)
	}
	event(map[string]any{"type": "response.created", "response": response("in_progress", []any{}, nil)})
	event(map[string]any{"type": "response.in_progress", "response": response("in_progress", []any{}, nil)})
	event(map[string]any{"type": "response.output_item.added", "output_index": 0, "item": added})
	id := done["id"]
	switch {
	case answer.Call == nil:
		event(map[string]any{"type": "response.content_part.added", "item_id": id, "output_index": 0, "content_index": 0, "part": textPart("")})
		for _, piece := range llmtest.Chunks(answer.Text, 16) {
			event(map[string]any{"type": "response.output_text.delta", "item_id": id, "output_index": 0, "content_index": 0, "delta": piece})
		}
		event(map[string]any{"type": "response.output_text.done", "item_id": id, "output_index": 0, "content_index": 0, "text": answer.Text})
		event(map[string]any{"type": "response.content_part.done", "item_id": id, "output_index": 0, "content_index": 0, "part": textPart(answer.Text)})
	case answer.Call.Custom:
		for _, piece := range llmtest.Chunks(answer.Call.Input, 16) {
			event(map[string]any{"type": "response.custom_tool_call_input.delta", "item_id": id, "output_index": 0, "delta": piece})
		}
		event(map[string]any{"type": "response.custom_tool_call_input.done", "item_id": id, "output_index": 0, "input": answer.Call.Input})
	default:
		for _, piece := range llmtest.Chunks(answer.Call.Input, 16) {
			event(map[string]any{"type": "response.function_call_arguments.delta", "item_id": id, "output_index": 0, "delta": piece})
		}
		event(map[string]any{"type": "response.function_call_arguments.done", "item_id": id, "output_index": 0, "arguments": answer.Call.Input})
	}
	event(map[string]any{"type": "response.output_item.done", "output_index": 0, "item": done})
	event(map[string]any{"type": "response.completed", "response": response("completed", []any{done}, usage)})
}

// outputItem is the answer as the one output item of response n: as announced when it starts
// (in progress, empty) and when it is done.
func outputItem(a Answer, n int64) (added, done map[string]any) {
	if c := a.Call; c != nil {
		item := func(status, input string) map[string]any {
			if c.Custom {
				return map[string]any{"id": fmt.Sprintf("ctc_test_%d", n), "type": "custom_tool_call", "status": status,
					"call_id": fmt.Sprintf("call_test_%d", n), "name": c.Name, "input": input}
			}
			return map[string]any{"id": fmt.Sprintf("fc_test_%d", n), "type": "function_call", "status": status,
				"call_id": fmt.Sprintf("call_test_%d", n), "name": c.Name, "arguments": input}
		}
		return item("in_progress", ""), item("completed", c.Input)
	}
	item := func(status string, content []any) map[string]any {
		return map[string]any{"id": fmt.Sprintf("msg_test_%d", n), "type": "message", "status": status,
			"role": "assistant", "content": content}
	}
	return item("in_progress", []any{}), item("completed", []any{textPart(a.Text)})
}

func textPart(text string) map[string]any {
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}}
}
