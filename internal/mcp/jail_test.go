package mcp_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/hosttest"
	"github.com/agenthost/host/internal/jobtype"
)

// A tool call of a jailed bash function, through the host `host serve` builds (package wire):
// it runs in the jail, as the jail's user, and its output comes back as progress and result.
func TestJailedToolCall(t *testing.T) {
	h := hosttest.New(t, map[string]string{
		"echo.sh": "# sandbox\n# tool: Echoes its arguments\npayload=$(cat)\necho \"working on $ARG_WORD\" >&2\necho \"{\\\"got\\\": $payload, \\\"uid\\\": $(id -u)}\"\n",
	})
	var mu sync.Mutex
	var progress []string
	cs := connect(t, serve(t, h, nil), &sdk.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
		mu.Lock()
		progress = append(progress, r.Params.Message)
		mu.Unlock()
	}})
	params := &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"word": "it"}}
	params.SetProgressToken(7)
	res, err := cs.CallTool(ctxT(t), params)
	if err != nil {
		t.Fatalf("tools/call echo: %v", err)
	}
	if res.IsError {
		t.Fatalf("echo failed: %s", res.Content[0].(*sdk.TextContent).Text)
	}
	got := asJSON(t, res.StructuredContent)
	if !strings.HasPrefix(got, `{"got":{"word":"it"},"uid":`) || strings.HasSuffix(got, `"uid":0}`) {
		t.Errorf("structuredContent = %s, want the arguments back from a jail user that is not root", got)
	}
	id, _ := res.Meta["job_id"].(string)
	rec := h.Record(id)
	if rec.Status != jobtype.Succeeded || rec.Caller != "mcp go-sdk-test/1.0" || rec.Host != "test" {
		t.Errorf("job %s: %s by %q on %q", id, rec.Status, rec.Caller, rec.Host)
	}
	// Every line of the job's log, as `host logs` reads it, came as progress before the result.
	c, err := client.New(ctxT(t), h.NC)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := c.Logs(ctxT(t), id)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, l := range lines {
		want = append(want, l.Text)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(want) == 0 || want[0] != "working on it" || fmt.Sprint(progress) != fmt.Sprint(want) {
		t.Errorf("progress = %q, want the job's log %q, its stderr line first", progress, want)
	}
}
