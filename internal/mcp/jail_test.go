package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// A tool call of a jailed bash function, through the host `host serve` builds (package app):
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
	// The stderr line is printed first, but stdout and stderr are two pipes read side by side:
	// which the log holds first is not the job's to say, only that progress follows the log.
	if !slices.Contains(want, "working on it") || fmt.Sprint(progress) != fmt.Sprint(want) {
		t.Errorf("progress = %q, want the job's log %q, its stderr line among them", progress, want)
	}
}

// callerPy calls its tools: as an agent in the jail would, with nothing but the standard
// library: urllib through the job's proxy (http_proxy) to HOST_MCP_URL, with HOST_MCP_TOKEN.
const callerPy = `# sandbox
# tools: hello
import json, os, urllib.request, urllib.error

# Read in main's time, not at import: a warm jail imports the script before its job comes.
def rpc(session, method, params=None, id=1, token=None):
    if token is None:
        token = os.environ["HOST_MCP_TOKEN"]
    body = {"jsonrpc": "2.0", "method": method}
    if id is not None:
        body["id"] = id
    if params is not None:
        body["params"] = params
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token:
        headers["Authorization"] = "Bearer " + token
    if session:
        headers["Mcp-Session-Id"] = session
    req = urllib.request.Request(os.environ["HOST_MCP_URL"], data=json.dumps(body).encode(), method="POST", headers=headers)
    with urllib.request.urlopen(req, timeout=60) as resp:
        sid = resp.headers.get("Mcp-Session-Id") or session
        text = resp.read().decode()
    for line in text.splitlines():
        if line.startswith("data: "):
            msg = json.loads(line[6:])
            if "id" in msg:
                return sid, msg
    return sid, json.loads(text) if text.strip() else None

def main():
    sid, init = rpc(None, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "in-jail", "version": "1"}})
    rpc(sid, "notifications/initialized", id=None)
    _, listed = rpc(sid, "tools/list", {}, id=2)
    _, called = rpc(sid, "tools/call", {"name": "hello", "arguments": {"name": "jail"}}, id=3)
    _, refused = rpc(sid, "tools/call", {"name": "other", "arguments": {}}, id=4)
    try:
        rpc(None, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}, token="")
        no_token = 200
    except urllib.error.HTTPError as e:
        no_token = e.code
    return {"url": os.environ["HOST_MCP_URL"], "server": init["result"]["serverInfo"]["name"], "tools": [t["name"] for t in listed["result"]["tools"]],
            "called": called["result"], "refused": refused.get("error", {}).get("message"), "no_token": no_token}
`

// A function that declares tools: finds an MCP endpoint in its jail, through its proxy, that
// lists and calls exactly what it declared; each call is a job of its own in the caller's flow.
func TestToolsInTheJail(t *testing.T) {
	files := examples(t, "hello.py")
	files["caller.py"] = callerPy
	files["other.py"] = "# tool: Not declared by caller\ndef main():\n    return 1\n"
	h := hosttest.New(t, files)
	reply := h.Call("caller", "{}")
	if st := reply.Header.Get(bus.HeaderJobStatus); st != "succeeded" {
		t.Fatalf("caller: %s %s", st, reply.Data)
	}
	var got struct {
		URL, Server string
		Tools       []string
		Called      struct {
			IsError           bool
			StructuredContent map[string]any
			Meta              map[string]any `json:"_meta"`
		}
		Refused string
		NoToken int `json:"no_token"`
	}
	if err := json.Unmarshal(reply.Data, &got); err != nil {
		t.Fatalf("caller's result %s: %v", reply.Data, err)
	}
	if got.URL != "http://host.mcp/mcp" || got.Server != "agent-host" {
		t.Errorf("HOST_MCP_URL %q, server %q", got.URL, got.Server)
	}
	if fmt.Sprint(got.Tools) != "[hello]" {
		t.Errorf("tools = %v, want exactly the declared [hello]", got.Tools)
	}
	if got.Called.IsError || got.Called.StructuredContent["greeting"] != "Hello, jail!" {
		t.Errorf("hello called from the jail: %+v", got.Called)
	}
	if !strings.Contains(got.Refused, `unknown tool "other"`) {
		t.Errorf("a call of an undeclared function: %q, want the protocol's unknown tool", got.Refused)
	}
	if got.NoToken != 401 {
		t.Errorf("the endpoint without the job's token answered %d, want 401", got.NoToken)
	}
	callerID := reply.Header.Get(bus.HeaderJobID)
	inner := h.Record(fmt.Sprint(got.Called.Meta["job_id"]))
	caller := h.Record(callerID)
	if inner.Function != "hello" || inner.FlowID != caller.FlowID || inner.ParentJob != callerID || inner.Hop != caller.Hop+1 ||
		inner.Caller != "job "+callerID+" (caller)" || inner.Status != jobtype.Succeeded || inner.StartedBy != "flow step caller (job "+callerID+")" {
		t.Errorf("the tool call's job: function %s, flow %s (caller's %s), parent %s (want %s), hop %d, caller %q, %s, started by %q",
			inner.Function, inner.FlowID, caller.FlowID, inner.ParentJob, callerID, inner.Hop, inner.Caller, inner.Status, inner.StartedBy)
	}
}
