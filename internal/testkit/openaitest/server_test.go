package openaitest

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/agenthost/host/internal/testkit/llmtest"
)

// post sends a Responses API request with key (none when empty).
func post(t *testing.T, s *Server, key string, body map[string]any) (int, []map[string]any) {
	t.Helper()
	h := map[string]string{}
	if key != "" {
		h["Authorization"] = "Bearer " + key
	}
	return llmtest.Post(t, s.BaseURL()+"/responses", h, body)
}

var types = llmtest.Types

func userMessage(text string) map[string]any {
	return map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": text}}}
}

func TestStreamsTextAsTheResponsesAPIDoes(t *testing.T) {
	s, err := Start(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	prompt := "a prompt long enough to be streamed in several deltas"
	status, events := post(t, s, "sk-test", map[string]any{"model": "gpt-test", "stream": true, "input": []any{
		map[string]any{"type": "message", "role": "developer", "content": []any{map[string]any{"type": "input_text", "text": "be brief"}}},
		userMessage(prompt),
	}})
	if status != 200 {
		t.Fatalf("status %d", status)
	}
	got := types(events)
	deltas := 0
	var text strings.Builder
	for _, e := range events {
		if e["type"] == "response.output_text.delta" {
			deltas++
			text.WriteString(e["delta"].(string))
		}
	}
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}
	for range deltas {
		want = append(want, "response.output_text.delta")
	}
	want = append(want, "response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed")
	if deltas < 2 || !reflect.DeepEqual(got, want) {
		t.Fatalf("events %v", got)
	}
	if text.String() != "You said: "+prompt {
		t.Fatalf("deltas make %q", text.String())
	}
	for i, e := range events {
		if e["sequence_number"] != float64(i) {
			t.Fatalf("event %d has sequence_number %v", i, e["sequence_number"])
		}
	}
	item := events[len(events)-2]["item"].(map[string]any)
	content := item["content"].([]any)[0].(map[string]any)
	if item["type"] != "message" || item["role"] != "assistant" || content["type"] != "output_text" || content["text"] != "You said: "+prompt {
		t.Fatalf("done item %v", item)
	}
	completed := events[len(events)-1]["response"].(map[string]any)
	usage, _ := completed["usage"].(map[string]any)
	if completed["id"] == "" || completed["status"] != "completed" || completed["model"] != "gpt-test" || usage["output_tokens"] == nil {
		t.Fatalf("completed %v", completed)
	}
	reqs := s.Requests()
	if len(reqs) != 1 || reqs[0].Path != "/v1/responses" || reqs[0].LastUserText() != prompt ||
		!strings.Contains(reqs[0].Text(), "be brief") || reqs[0].Header.Get("Authorization") != "Bearer sk-test" {
		t.Fatalf("recorded %+v", reqs)
	}
}

func TestToolCallsAndTheirOutputs(t *testing.T) {
	s, err := Start(func(r Request) Answer {
		if outs := r.TurnToolOutputs(); len(outs) > 0 {
			return Answer{Text: "the tool said " + outs[0].Output}
		}
		if r.LastUserText() == "function" {
			return Answer{Call: &Call{Name: "shell", Input: `{"cmd":"id -u"}`}}
		}
		return Answer{Call: &Call{Name: "exec", Custom: true, Input: `text(await tools.exec_command({cmd: "id -u"}))`}}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	_, events := post(t, s, "k", map[string]any{"stream": true, "input": []any{userMessage("custom")}})
	got := types(events)
	if got[3] != "response.custom_tool_call_input.delta" || got[len(got)-3] != "response.custom_tool_call_input.done" {
		t.Fatalf("events %v", got)
	}
	call := events[len(events)-2]["item"].(map[string]any)
	if call["type"] != "custom_tool_call" || call["name"] != "exec" || call["input"] != `text(await tools.exec_command({cmd: "id -u"}))` || call["call_id"] == "" {
		t.Fatalf("call %v", call)
	}

	_, events = post(t, s, "k", map[string]any{"stream": true, "input": []any{userMessage("function")}})
	fn := events[len(events)-2]["item"].(map[string]any)
	if fn["type"] != "function_call" || fn["name"] != "shell" || fn["arguments"] != `{"cmd":"id -u"}` {
		t.Fatalf("function call %v", fn)
	}

	// The client runs the tool and sends the conversation back with its output.
	_, events = post(t, s, "k", map[string]any{"stream": true, "input": []any{userMessage("custom"), call,
		map[string]any{"type": "custom_tool_call_output", "call_id": call["call_id"], "output": "65534"}}})
	item := events[len(events)-2]["item"].(map[string]any)
	if text := item["content"].([]any)[0].(map[string]any)["text"]; text != "the tool said 65534" {
		t.Fatalf("answer %q", text)
	}
	if outs := s.Requests()[2].ToolOutputs(); len(outs) != 1 || outs[0].CallID != call["call_id"] {
		t.Fatalf("tool outputs %+v", outs)
	}
	if outs := s.Requests()[2].TurnToolOutputs(); len(outs) != 1 {
		t.Fatalf("this turn's tool outputs %+v", outs)
	}
	// A later turn replays the earlier one: its output is not this turn's.
	later := Request{llmtest.Request{Body: map[string]any{"input": append(s.Requests()[2].Input(), userMessage("and now?"))}}}
	if len(later.ToolOutputs()) != 1 || len(later.TurnToolOutputs()) != 0 || later.LastUserText() != "and now?" {
		t.Fatalf("later turn: %+v %+v", later.ToolOutputs(), later.TurnToolOutputs())
	}
}

func TestRefusesWithoutAKeyAndAnswersWithoutAStream(t *testing.T) {
	s, err := Start(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	status, body := post(t, s, "", map[string]any{"input": "hi"})
	if status != http.StatusUnauthorized || body[0]["error"] == nil {
		t.Fatalf("without a key: %d %v", status, body)
	}
	status, body = post(t, s, "k", map[string]any{"input": "hi"})
	out := body[0]["output"].([]any)[0].(map[string]any)
	if status != 200 || body[0]["status"] != "completed" || out["content"].([]any)[0].(map[string]any)["text"] != "You said: hi" {
		t.Fatalf("not streamed: %d %v", status, body)
	}
	resp, err := http.Get(s.BaseURL() + "/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("models: %d", resp.StatusCode)
	}
	if n := len(s.Requests()); n != 3 {
		t.Fatalf("recorded %d requests", n)
	}
}
