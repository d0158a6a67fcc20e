package llmtest

import (
	"reflect"
	"testing"
)

func TestLastUserText(t *testing.T) {
	user := func(content any) any { return map[string]any{"role": "user", "content": content} }
	part := func(typ, text string) any { return map[string]any{"type": typ, "text": text} }
	cases := []struct {
		name string
		msgs []any
		want string
	}{
		{"string content", []any{user("  hi  ")}, "hi"},
		{"last text part of the last user message", []any{user("old"), map[string]any{"role": "assistant", "content": "x"},
			user([]any{part("text", "context"), part("text", "typed"), part("image", "")})}, "typed"},
		{"another API's part type is not text", []any{user([]any{part("input_text", "typed")})}, ""},
		{"no user message", []any{map[string]any{"role": "assistant", "content": "x"}}, ""},
		{"nothing", nil, ""},
	}
	for _, tc := range cases {
		if got := LastUserText(tc.msgs, "text"); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestText(t *testing.T) {
	got := Text("system", []any{map[string]any{"content": []any{map[string]any{"text": "a"}, "b"}}}, nil)
	if got != "system\na\nb\n" {
		t.Fatalf("Text = %q", got)
	}
}

func TestChunks(t *testing.T) {
	cases := []struct {
		s    string
		want []string
	}{
		{"", []string{""}},
		{"abc", []string{"abc"}},
		{"abcdefg", []string{"abc", "def", "g"}},
		{"héllo!", []string{"hél", "lo!"}},
	}
	for _, tc := range cases {
		if got := Chunks(tc.s, 3); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Chunks(%q) = %q, want %q", tc.s, got, tc.want)
		}
	}
}
