package anthropictest

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/agenthost/host/internal/testkit/llmtest"
)

func TestMessagesAPI(t *testing.T) {
	s, err := Start(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	url := s.URL + "/v1/messages"
	withKey := map[string]string{"X-Api-Key": "sk-ant-test", "anthropic-version": "2023-06-01"}
	prompt := "a prompt long enough to be streamed in several deltas"
	messages := []any{
		map[string]any{"role": "user", "content": "an earlier turn"},
		map[string]any{"role": "assistant", "content": "You said: an earlier turn"},
		map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "<context>"},
			map[string]any{"type": "text", "text": prompt},
		}},
	}

	status, events := llmtest.Post(t, url, withKey, map[string]any{"model": "claude-test", "stream": true, "system": "be brief", "messages": messages})
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	var text strings.Builder
	deltas := 0
	for _, e := range events {
		if e["type"] == "content_block_delta" {
			deltas++
			text.WriteString(e["delta"].(map[string]any)["text"].(string))
		}
	}
	want := []string{"message_start", "content_block_start"}
	for range deltas {
		want = append(want, "content_block_delta")
	}
	want = append(want, "content_block_stop", "message_delta", "message_stop")
	if got := llmtest.Types(events); deltas < 2 || !reflect.DeepEqual(got, want) {
		t.Fatalf("events %v", got)
	}
	if text.String() != "You said: "+prompt {
		t.Fatalf("deltas make %q", text.String())
	}

	status, body := llmtest.Post(t, url, withKey, map[string]any{"model": "claude-test", "messages": []any{map[string]any{"role": "user", "content": "hi"}}})
	content := body[0]["content"].([]any)[0].(map[string]any)
	if status != http.StatusOK || body[0]["model"] != "claude-test" || content["text"] != "You said: hi" {
		t.Fatalf("not streamed: %d %v", status, body)
	}

	status, body = llmtest.Post(t, url, nil, map[string]any{"messages": messages})
	if status != http.StatusUnauthorized || body[0]["error"].(map[string]any)["type"] != "authentication_error" {
		t.Fatalf("without a key: %d %v", status, body)
	}

	reqs := s.Requests()
	if len(reqs) != 3 || reqs[0].Path != "/v1/messages" || reqs[0].LastUserText() != prompt ||
		!strings.Contains(reqs[0].Text(), "be brief") || !strings.Contains(reqs[0].Text(), "an earlier turn") ||
		reqs[0].Header.Get("X-Api-Key") != "sk-ant-test" {
		t.Fatalf("recorded %+v", reqs)
	}
}
