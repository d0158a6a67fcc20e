package anthropictest

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/agenthost/host/internal/testkit/llmtest"
)

// Answer is what the server answers a request with: a text, or a call of one of the tools the
// request offers (ToolUse), which the agent answers with a tool_result in its next request.
type Answer struct {
	Text    string
	ToolUse *ToolUse
}

// ToolUse is a tool_use block: the model calling a tool.
type ToolUse struct {
	ID    string
	Name  string
	Input map[string]any
}

// Responder chooses the answer to a request.
type Responder func(Request) Answer

// StartResponder is Start with answers that may call tools: a test of an agent's tools (an MCP
// server's, say) answers the request that offers the tool with its call, and the next, which
// carries the tool_result, with text.
func StartResponder(respond Responder) (*Server, error) {
	s, err := Start(nil)
	if err != nil {
		return nil, err
	}
	s.respond = respond
	return s, nil
}

// ToolNames are the names of the tools the request offers.
func (r Request) ToolNames() []string {
	tools, _ := r.Body["tools"].([]any)
	var names []string
	for _, t := range tools {
		if m, ok := t.(map[string]any); ok {
			if n, ok := m["name"].(string); ok {
				names = append(names, n)
			}
		}
	}
	return names
}

// ToolResults are the tool_result blocks of the request's messages, by tool_use id: their
// content as text, and whether the agent marked them errors.
func (r Request) ToolResults() map[string]ToolResult {
	out := map[string]ToolResult{}
	for _, msg := range r.Messages() {
		m, _ := msg.(map[string]any)
		blocks, _ := m["content"].([]any)
		for _, b := range blocks {
			block, _ := b.(map[string]any)
			if block["type"] != "tool_result" {
				continue
			}
			id, _ := block["tool_use_id"].(string)
			isErr, _ := block["is_error"].(bool)
			out[id] = ToolResult{Text: llmtest.Text(block["content"]), IsError: isErr}
		}
	}
	return out
}

// ToolResult is what an agent sent back for a tool_use.
type ToolResult struct {
	Text    string
	IsError bool
}

// toolUse answers with a tool_use, streamed or not.
func (s *Server) toolUse(w http.ResponseWriter, req Request, tu *ToolUse) {
	model, _ := req.Body["model"].(string)
	id := fmt.Sprintf("msg_test_%d", s.ids.Add(1))
	input := tu.Input
	if input == nil {
		input = map[string]any{}
	}
	block := map[string]any{"type": "tool_use", "id": tu.ID, "name": tu.Name, "input": input}
	usage := map[string]any{"input_tokens": 10 + len(req.Text())/4, "output_tokens": 20}
	if stream, _ := req.Body["stream"].(bool); !stream {
		llmtest.WriteJSON(w, http.StatusOK, map[string]any{
			"id": id, "type": "message", "role": "assistant", "model": model,
			"content": []any{block}, "stop_reason": "tool_use", "stop_sequence": nil, "usage": usage,
		})
		return
	}
	args, _ := json.Marshal(input)
	stream := llmtest.NewEventStream(w)
	event := func(data map[string]any) { stream.Send(data["type"].(string), data) }
	event(map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": map[string]any{"input_tokens": usage["input_tokens"], "output_tokens": 1},
	}})
	event(map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "tool_use", "id": tu.ID, "name": tu.Name, "input": map[string]any{}}})
	event(map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(args)}})
	event(map[string]any{"type": "content_block_stop", "index": 0})
	event(map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "tool_use", "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": 20}})
	event(map[string]any{"type": "message_stop"})
}
