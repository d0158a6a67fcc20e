package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/host"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/mcp"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/web"
	"github.com/agenthost/host/internal/webauth"
)

func TestMain(m *testing.M) { hosttest.Main(m) }

const testToken = "0123456789abcdef0123456789abcdef"

// examples are the example functions of the repository, as they are.
func examples(t *testing.T, names ...string) map[string]string {
	t.Helper()
	files := map[string]string{}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join("..", "..", "functions", n))
		if err != nil {
			t.Fatal(err)
		}
		files[n] = string(b)
	}
	return files
}

// serve starts h's web face, changed by tweak, behind the token, and closes it at the end.
func serve(t testing.TB, h *hosttest.H, tweak func(*web.Config)) *httptest.Server {
	t.Helper()
	cfg := h.WebConfig()
	cfg.Auth = webauth.Config{Token: testToken}
	if tweak != nil {
		tweak(&cfg)
	}
	srv := httptest.NewServer(web.New(cfg))
	t.Cleanup(srv.Close)
	return srv
}

// bearer adds the token to every request of a client.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// connect opens a session of the Go SDK's client with /mcp.
func connect(t testing.TB, srv *httptest.Server, opts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	return connectTo(t, srv.URL+"/mcp", testToken, opts)
}

func connectTo(t testing.TB, url, token string, opts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "go-sdk-test", Version: "1.0"}, opts)
	tr := &sdk.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("connect to /mcp: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func toolsByName(t *testing.T, cs *sdk.ClientSession) map[string]*sdk.Tool {
	t.Helper()
	res, err := cs.ListTools(ctxT(t), nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	out := map[string]*sdk.Tool{}
	for _, tl := range res.Tools {
		out[tl.Name] = tl
	}
	return out
}

func asJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var norm any
	json.Unmarshal(b, &norm)
	b, _ = json.Marshal(norm)
	return string(b)
}

func normJSON(t *testing.T, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("bad JSON %s: %v", s, err)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// The tools of the example functions, as the Go SDK's client lists them: which are offered,
// their schemas from main's signatures, their descriptions from the scripts.
func TestListTools(t *testing.T) {
	files := examples(t, "wordcount.ts", "hello.py", "step1.py", "step2.sh", "whoami.sh")
	// Only these two opt in.
	files["hello.py"] = "# tool: Greets someone by name\n" + files["hello.py"]
	files["wordcount.ts"] = "// tool\n" + files["wordcount.ts"]
	h := hosttest.NewEngine(t, files, hosttest.NewRuns())

	t.Run("tool: lines", func(t *testing.T) {
		tools := toolsByName(t, connect(t, serve(t, h, nil), nil))
		if got := sortedNames((tools)); !reflect.DeepEqual(got, []string{"hello", "wordcount"}) {
			t.Fatalf("tools = %v, want [hello wordcount]: only functions that say tool:", got)
		}
		wc := tools["wordcount"]
		if want := annot.Doc("wordcount.ts", []byte(files["wordcount.ts"])); wc.Description != want || want == "" {
			t.Errorf("wordcount's description = %q, want its doc comment %q", wc.Description, want)
		}
		if got, want := asJSON(t, wc.InputSchema), normJSON(t, `{"type":"object","properties":{"text":{"type":"string"},"top":{"type":"number","default":3}},"required":["text"]}`); got != want {
			t.Errorf("wordcount's inputSchema = %s, want %s", got, want)
		}
		if wc.OutputSchema != nil {
			t.Errorf("wordcount declares no return type, yet has an outputSchema: %v", wc.OutputSchema)
		}
		hello := tools["hello"]
		if hello.Description != "Greets someone by name" {
			t.Errorf("hello's description = %q, want its tool: line's", hello.Description)
		}
		if got, want := asJSON(t, hello.InputSchema), normJSON(t, `{"type":"object","properties":{"name":{"type":"string","default":"world"}}}`); got != want {
			t.Errorf("hello's inputSchema = %s, want %s", got, want)
		}
	})
	t.Run("--mcp-all", func(t *testing.T) {
		tools := toolsByName(t, connect(t, serve(t, h, func(c *web.Config) { c.MCPAll = true }), nil))
		if got := sortedNames((tools)); !reflect.DeepEqual(got, []string{"hello", "step1", "step2", "whoami", "wordcount"}) {
			t.Fatalf("tools = %v, want every function", got)
		}
		if got, want := asJSON(t, tools["step1"].InputSchema), normJSON(t, `{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`); got != want {
			t.Errorf("step1's inputSchema = %s, want %s", got, want)
		}
		if got := asJSON(t, tools["step2"].InputSchema); got != `{"type":"object"}` {
			t.Errorf("step2 (bash) inputSchema = %s, want any object", got)
		}
		if d := tools["whoami"].Description; d != "A look at the jail from the inside: who runs, where, and what of the host is there." {
			t.Errorf("whoami's description = %q, want its comment's prose", d)
		}
	})
}

func sortedNames(m map[string]*sdk.Tool) []string {
	return slices.Sorted(maps.Keys(m))
}

// A function added, changed or removed is listed as the directory now has it, and the
// session is told the list changed.
func TestToolsFollowTheDirectory(t *testing.T) {
	h := hosttest.NewEngine(t, map[string]string{"a.py": "# tool: first\ndef main(x: int):\n    return x\n"}, hosttest.NewRuns())
	changed := make(chan struct{}, 10)
	cs := connect(t, serve(t, h, nil), &sdk.ClientOptions{ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
		changed <- struct{}{}
	}})
	if got := sortedNames((toolsByName(t, cs))); !reflect.DeepEqual(got, []string{"a"}) {
		t.Fatalf("tools = %v, want [a]", got)
	}
	h.Write("b.ts", "// tool: second\nexport function main(s: string) { return s }\n")
	h.Write("a.py", "# tool: first, changed\ndef main(x: int, y: str = 'z'):\n    return x\n")
	tools := toolsByName(t, cs)
	if got := sortedNames((tools)); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Fatalf("after adding b: tools = %v, want [a b]", got)
	}
	if tools["a"].Description != "first, changed" || !strings.Contains(asJSON(t, tools["a"].InputSchema), `"y"`) {
		t.Errorf("a is not listed as changed: %q %s", tools["a"].Description, asJSON(t, tools["a"].InputSchema))
	}
	select {
	case <-changed:
	case <-time.After(30 * time.Second):
		t.Error("no notifications/tools/list_changed after the list changed")
	}
	if err := os.Remove(filepath.Join(h.FnDir, "a.py")); err != nil {
		t.Fatal(err)
	}
	if got := sortedNames((toolsByName(t, cs))); !reflect.DeepEqual(got, []string{"b"}) {
		t.Fatalf("after removing a: tools = %v, want [b]", got)
	}
}

// A call is a job: its result as structuredContent and text, its log as progress, its record
// naming the client; a failed job is isError with the job's error.
func TestCallTool(t *testing.T) {
	runs := hosttest.NewRuns().
		On("hello", func(_ context.Context, j *jobtype.Job) *jobtype.Outcome {
			j.Log("stdout", []byte("getting ready"))
			j.Log("stderr", []byte("almost there"))
			var args struct{ Name string }
			json.Unmarshal(j.Payload, &args)
			return &jobtype.Outcome{Result: []byte(fmt.Sprintf(`{"greeting":"Hello, %s!"}`, args.Name))}
		}).
		On("count", func(context.Context, *jobtype.Job) *jobtype.Outcome {
			return &jobtype.Outcome{Result: []byte(`42`)}
		}).
		On("boom", func(context.Context, *jobtype.Job) *jobtype.Outcome {
			return &jobtype.Outcome{Err: &jobtype.TerminalError{Err: errors.New("bad input: no order")}, ExitCode: 4}
		})
	h := hosttest.NewEngine(t, map[string]string{
		"hello.py": "# tool\n\"\"\"Greets.\"\"\"\ndef main(name: str) -> dict:\n    return {}\n",
		"count.sh": "# tool: Counts\necho 42\n",
		"boom.sh":  "# tool: Fails\nexit 4\n",
	}, runs)
	var mu sync.Mutex
	var progress []string
	cs := connect(t, serve(t, h, nil), &sdk.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
		mu.Lock()
		progress = append(progress, fmt.Sprintf("%v %g %s", r.Params.ProgressToken, r.Params.Progress, r.Params.Message))
		mu.Unlock()
	}})
	if tl := toolsByName(t, cs)["hello"]; tl == nil || asJSON(t, tl.OutputSchema) != `{"type":"object"}` {
		t.Fatalf("hello's outputSchema is not its -> dict: %+v", tl)
	}

	params := &sdk.CallToolParams{Name: "hello", Arguments: map[string]any{"name": "Ada"}}
	params.SetProgressToken("p1")
	res, err := cs.CallTool(ctxT(t), params)
	if err != nil {
		t.Fatalf("tools/call hello: %v", err)
	}
	if res.IsError {
		t.Fatalf("hello failed: %+v", res.Content)
	}
	if got := asJSON(t, res.StructuredContent); got != `{"greeting":"Hello, Ada!"}` {
		t.Errorf("structuredContent = %s", got)
	}
	if len(res.Content) != 1 || normJSON(t, res.Content[0].(*sdk.TextContent).Text) != `{"greeting":"Hello, Ada!"}` {
		t.Errorf("content = %+v, want one text block with the result", res.Content)
	}
	id, _ := res.Meta["job_id"].(string)
	rec := h.Record(id)
	if rec.Status != jobtype.Succeeded || rec.Caller != "mcp go-sdk-test/1.0" || rec.Function != "hello" {
		t.Errorf("job %q record: status %s, caller %q, function %q; want succeeded, the MCP client, hello", id, rec.Status, rec.Caller, rec.Function)
	}
	// Who started it, as a host vouches for it (the face asked one to sign it).
	if rec.StartedBy != "MCP client go-sdk-test/1.0" || rec.Starter != "" {
		t.Errorf("job %q record: started_by %q, starter %q; want the MCP client, no person", id, rec.StartedBy, rec.Starter)
	}
	mu.Lock()
	if want := []string{"p1 1 getting ready", "p1 2 almost there"}; !reflect.DeepEqual(progress, want) {
		t.Errorf("progress = %q, want %q (every log line, in order, before the result)", progress, want)
	}
	mu.Unlock()

	// A result that is not an object is text only: structured content must be an object.
	res, err = cs.CallTool(ctxT(t), &sdk.CallToolParams{Name: "count"})
	if err != nil || res.IsError || res.StructuredContent != nil || res.Content[0].(*sdk.TextContent).Text != "42" {
		t.Errorf("count: %v %+v", err, res)
	}

	res, err = cs.CallTool(ctxT(t), &sdk.CallToolParams{Name: "boom"})
	if err != nil {
		t.Fatalf("tools/call boom: %v (a failed job is a result, not a protocol error)", err)
	}
	text := res.Content[0].(*sdk.TextContent).Text
	if !res.IsError || !strings.Contains(text, "bad input: no order") {
		t.Errorf("boom: isError %t, text %q; want isError with the job's error", res.IsError, text)
	}
	if rec := h.Record(res.Meta["job_id"].(string)); rec.Status != jobtype.Failed || rec.Caller != "mcp go-sdk-test/1.0" {
		t.Errorf("boom's record: %s by %q", rec.Status, rec.Caller)
	}
}

// Arguments main would refuse are refused before any job exists, in the host's words; a tool
// that is not offered is the protocol's error.
func TestBadCalls(t *testing.T) {
	var ran atomic.Int32
	runs := hosttest.NewRuns().On("wordcount", func(context.Context, *jobtype.Job) *jobtype.Outcome {
		ran.Add(1)
		return &jobtype.Outcome{Result: []byte(`{}`)}
	})
	files := examples(t, "wordcount.ts", "hello.py")
	files["wordcount.ts"] = "// tool\n" + files["wordcount.ts"]
	h := hosttest.NewEngine(t, files, runs)
	cs := connect(t, serve(t, h, nil), nil)
	cases := []struct {
		name string
		args any
		want string
	}{
		{"wrong type", map[string]any{"text": 5}, `argument "text": expected string, got number 5; fix the payload (the types come from main's signature)`},
		{"two wrong", map[string]any{"text": true, "top": "x"}, `argument "text": expected string, got boolean true; argument "top": expected number, got string "x"`},
		{"missing", map[string]any{"top": 2}, `missing required argument "text" for main(text, top=3)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := cs.CallTool(ctxT(t), &sdk.CallToolParams{Name: "wordcount", Arguments: tc.args})
			if err != nil {
				t.Fatalf("tools/call: %v; a bad argument is the tool's error, for the model to fix", err)
			}
			if text := res.Content[0].(*sdk.TextContent).Text; !res.IsError || !strings.Contains(text, tc.want) {
				t.Errorf("isError %t, %q; want %q", res.IsError, text, tc.want)
			}
			if res.Meta["job_id"] != nil {
				t.Errorf("a refused call names a job: %v", res.Meta)
			}
		})
	}
	if n := ran.Load(); n != 0 {
		t.Errorf("refused calls ran %d jobs", n)
	}
	for _, name := range []string{"hello", "nope"} { // hello is a function, but not a tool
		_, err := cs.CallTool(ctxT(t), &sdk.CallToolParams{Name: name})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("unknown tool %q", name)) {
			t.Errorf("tools/call %s: err = %v, want the protocol's unknown tool", name, err)
		}
	}
}

// Canceling a call cancels its job, as `host cancel` does: the record says canceled, by the
// client.
func TestCancelCall(t *testing.T) {
	started := make(chan string, 1)
	runs := hosttest.NewRuns().On("slow", func(ctx context.Context, j *jobtype.Job) *jobtype.Outcome {
		started <- j.ID
		<-ctx.Done()
		return &jobtype.Outcome{Err: context.Cause(ctx), ExitCode: -1}
	})
	h := hosttest.NewEngine(t, map[string]string{"slow.sh": "# tool: Takes its time\nsleep 600\n"}, runs)
	cs := connect(t, serve(t, h, nil), nil)
	ctx, cancel := context.WithCancel(ctxT(t))
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "slow"})
		errc <- err
	}()
	var id string
	select {
	case id = <-started:
	case <-time.After(60 * time.Second):
		t.Fatal("the job never started")
	}
	cancel() // the SDK sends notifications/cancelled
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("canceled call returned %v", err)
	}
	rec := h.Record(id)
	if rec.Status != jobtype.Canceled || rec.Caller != "mcp go-sdk-test/1.0" {
		t.Errorf("job %s: status %s, caller %q; want canceled, by the MCP client", id, rec.Status, rec.Caller)
	}
	if !strings.Contains(rec.Error, "MCP cancellation") {
		t.Errorf("job %s's error %q does not say who canceled it", id, rec.Error)
	}
	// The session goes on.
	if _, err := cs.ListTools(ctxT(t), nil); err != nil {
		t.Errorf("tools/list after a cancellation: %v", err)
	}
}

// No token or a wrong one is a 401; a body that is no JSON-RPC is the protocol's error, and the
// face serves on.
func TestBadRequests(t *testing.T) {
	h := hosttest.NewEngine(t, map[string]string{"hello.sh": "# tool: Says hi\necho hi\n"}, hosttest.NewRuns())
	srv := serve(t, h, nil)
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}`
	mcpHeaders := map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
	with := func(extra map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range mcpHeaders {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	cases := []struct {
		name     string
		body     string
		hdr      map[string]string
		wantCode int
		wantBody string
	}{
		{"no token", init, mcpHeaders, 401, "needs the host's token"},
		{"wrong token", init, with(map[string]string{"Authorization": "Bearer not-the-token-at-all"}), 401, "wrong token"},
		{"not JSON", `{"jsonrpc": "2.0", "id": 1, "method": `, with(map[string]string{"Authorization": "Bearer " + testToken}), 400, "malformed payload: unmarshaling jsonrpc message"},
		{"not JSON-RPC", `[1, 2, 3]`, with(map[string]string{"Authorization": "Bearer " + testToken}), 400, "malformed payload: unmarshaling jsonrpc message"},
		{"no session", `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, with(map[string]string{"Authorization": "Bearer " + testToken}), 200, `"error":{"code":0,"message":"method \"tools/list\" is invalid during session initialization"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, body, _ := hosttest.Post(t, srv.URL+"/mcp", tc.body, tc.hdr)
			if code != tc.wantCode || !strings.Contains(body, tc.wantBody) {
				t.Errorf("status %d, body %q; want %d containing %q", code, body, tc.wantCode, tc.wantBody)
			}
		})
	}
	// A GET without a token is refused too (the standalone stream).
	resp, err := http.Get(srv.URL + "/mcp")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("GET /mcp without a token: %d, want 401", resp.StatusCode)
	}
	// A name of this machine other than an address (the dashboard's host.localhost) is served
	// with the token, as the rest of the web face is.
	req, _ := http.NewRequest("POST", srv.URL+"/mcp", strings.NewReader(init))
	req.Host = "host.localhost"
	for k, v := range with(map[string]string{"Authorization": "Bearer " + testToken}) {
		req.Header.Set(k, v)
	}
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"serverInfo":{"name":"agent-host"`) {
			t.Errorf("initialize with Host host.localhost: %d %s", resp.StatusCode, b)
		}
	}
	// And after all that, a real client still gets its answer.
	res, err := connect(t, srv, nil).CallTool(ctxT(t), &sdk.CallToolParams{Name: "hello"})
	if err != nil || res.IsError {
		t.Fatalf("a good call after bad requests: %v %+v", err, res)
	}
}

// 100 calls at once are 100 jobs, none lost, and the function's concurrency: holds.
func TestConcurrentCalls(t *testing.T) {
	var inFlight, most atomic.Int32
	runs := hosttest.NewRuns().On("work", func(_ context.Context, j *jobtype.Job) *jobtype.Outcome {
		n := inFlight.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(10 * time.Millisecond)
		inFlight.Add(-1)
		return &jobtype.Outcome{Result: j.Payload}
	})
	h := hosttest.NewEngine(t, map[string]string{"work.py": "# tool: Works\n# concurrency: 3\ndef main(i: int):\n    return {'i': i}\n"}, runs)
	srv := serve(t, h, nil)
	sessions := []*sdk.ClientSession{connect(t, srv, nil), connect(t, srv, nil), connect(t, srv, nil), connect(t, srv, nil)}
	const calls = 100
	ids := make([]string, calls)
	errs := make([]error, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := sessions[i%len(sessions)].CallTool(ctxT(t), &sdk.CallToolParams{Name: "work", Arguments: map[string]any{"i": i}})
			switch {
			case err != nil:
				errs[i] = err
			case res.IsError:
				errs[i] = fmt.Errorf("isError: %v", res.Content[0].(*sdk.TextContent).Text)
			case asJSON(t, res.StructuredContent) != fmt.Sprintf(`{"i":%d}`, i):
				errs[i] = fmt.Errorf("call %d answered with %s", i, asJSON(t, res.StructuredContent))
			default:
				ids[i], _ = res.Meta["job_id"].(string)
			}
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for i := range calls {
		if errs[i] != nil {
			t.Errorf("call %d: %v", i, errs[i])
			continue
		}
		if ids[i] == "" || seen[ids[i]] {
			t.Errorf("call %d: job id %q missing or shared", i, ids[i])
		}
		seen[ids[i]] = true
		if rec := h.Record(ids[i]); rec.Status != jobtype.Succeeded || rec.Caller != "mcp go-sdk-test/1.0" {
			t.Errorf("job %s: %s by %q", ids[i], rec.Status, rec.Caller)
		}
	}
	if m := most.Load(); m > 3 {
		t.Errorf("%d jobs of work ran at once; its concurrency: is 3", m)
	}
}

// A job's endpoint (tools:) lists and calls exactly what the job declared, to its own token
// only; its calls join the job's flow; once the job ends, the token is refused and an
// unfinished call's job is canceled.
func TestJobTools(t *testing.T) {
	started := make(chan string, 1)
	runs := hosttest.NewRuns().On("slow", func(ctx context.Context, j *jobtype.Job) *jobtype.Outcome {
		started <- j.ID
		<-ctx.Done()
		return &jobtype.Outcome{Err: context.Cause(ctx), ExitCode: -1}
	})
	h := hosttest.NewEngine(t, map[string]string{"hello.sh": "echo\n", "slow.sh": "echo\n", "other.sh": "# tool: offered on /mcp, not to the job\necho\n"}, runs)
	jt := mcp.NewJobTools(mcp.Config{NC: h.NC, FunctionsDir: h.FnDir})
	handler, token, end := jt.Open(jobtype.ToolsJob{ID: "caller-1", FlowID: "flow-1", Function: "caller", Hop: 2}, []string{"hello", "slow"})
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)

	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}`
	hdr := map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
	for _, bad := range []string{"", "Bearer " + testToken, "Bearer " + token + "x"} {
		hdr["Authorization"] = bad
		if code, body, _ := hosttest.Post(t, srv.URL, init, hdr); code != 401 || !strings.Contains(body, "needs the job's token") {
			t.Errorf("Authorization %q: %d %q, want 401", bad, code, body)
		}
	}

	cs := connectTo(t, srv.URL, token, nil)
	if got := sortedNames(toolsByName(t, cs)); !reflect.DeepEqual(got, []string{"hello", "slow"}) {
		t.Errorf("tools = %v, want exactly the declared [hello slow]", got)
	}
	if _, err := cs.CallTool(ctxT(t), &sdk.CallToolParams{Name: "other"}); err == nil || !strings.Contains(err.Error(), `unknown tool "other"`) {
		t.Errorf("a call of an undeclared function: %v", err)
	}
	res, err := cs.CallTool(ctxT(t), &sdk.CallToolParams{Name: "hello"})
	if err != nil || res.IsError {
		t.Fatalf("hello: %v %+v", err, res)
	}
	rec := h.Record(res.Meta["job_id"].(string))
	if rec.FlowID != "flow-1" || rec.ParentJob != "caller-1" || rec.Hop != 3 || rec.Caller != "job caller-1 (caller)" {
		t.Errorf("the call's job: flow %q, parent %q, hop %d, caller %q; want the caller's flow, the caller as parent, one hop more",
			rec.FlowID, rec.ParentJob, rec.Hop, rec.Caller)
	}

	// A job at the hop limit calling a tool: the call is one step too many, and fails as a
	// looping flow does.
	deep, deepToken, endDeep := jt.Open(jobtype.ToolsJob{ID: "deep-1", FlowID: "flow-2", Function: "caller", Hop: host.DefaultMaxHops}, []string{"hello"})
	deepSrv := httptest.NewServer(deep)
	t.Cleanup(deepSrv.Close)
	t.Cleanup(endDeep)
	res, err = connectTo(t, deepSrv.URL, deepToken, nil).CallTool(ctxT(t), &sdk.CallToolParams{Name: "hello"})
	if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*sdk.TextContent).Text, "more than --max-hops") {
		t.Errorf("a tool call past the hop limit: %v %+v, want isError saying --max-hops", err, res)
	}

	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctxT(t), &sdk.CallToolParams{Name: "slow"})
		errc <- err
	}()
	var slowID string
	select {
	case slowID = <-started:
	case <-time.After(60 * time.Second):
		t.Fatal("slow never started")
	}
	end() // the calling job ended
	if rec := h.Record(slowID); rec.Status != jobtype.Canceled {
		t.Errorf("the unfinished call's job after its caller ended: %s, want canceled", rec.Status)
	}
	<-errc
	hdr["Authorization"] = "Bearer " + token
	if code, body, _ := hosttest.Post(t, srv.URL, init, hdr); code != 401 || !strings.Contains(body, "job caller-1, which has ended") {
		t.Errorf("the token after its job ended: %d %q, want 401", code, body)
	}
}
