package mcp_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/people"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/web"
	"github.com/agenthost/host/internal/webauth"
)

// /mcp is a face like /run: a tool call runs a function, so a login that may not run it (a
// runner whose --functions glob leaves it out, a viewer) is refused before any job exists, and
// a header a client sends in the guard's name changes nothing.
func TestToolCallsFollowTheLoginsRole(t *testing.T) {
	runs := hosttest.NewRuns().
		On("hello", func(context.Context, *jobtype.Job) *jobtype.Outcome {
			return &jobtype.Outcome{Result: []byte(`{"hi":1}`)}
		}).
		On("count", func(context.Context, *jobtype.Job) *jobtype.Outcome { return &jobtype.Outcome{Result: []byte(`42`)} })
	h := hosttest.NewEngine(t, map[string]string{
		"hello.sh": "# tool: Greets\necho '{}'\n",
		"count.sh": "# tool: Counts\necho 42\n",
	}, runs)
	const runnerToken, viewerToken = "runner-token-0123456789abcdef", "viewer-token-0123456789abcdef"
	hash := func(tok string) string { s := sha256.Sum256([]byte(tok)); return hex.EncodeToString(s[:]) }
	users := people.Users{ByName: map[string]people.User{
		"rui": {Name: "rui", Role: people.Runner, Functions: "hel*", TokenHash: hash(runnerToken)},
		"vic": {Name: "vic", Role: people.Viewer, TokenHash: hash(viewerToken)},
	}}
	srv := serve(t, h, func(c *web.Config) { c.Auth = webauth.Config{Token: testToken, Users: webauth.StaticUsers(users)} })

	rui := connectTo(t, srv.URL+"/mcp", runnerToken, nil)
	if tools := toolsByName(t, rui); tools["hello"] == nil || tools["count"] != nil {
		t.Fatalf("rui's tools/list: %v; want hello and not count, which its glob leaves out", tools)
	}
	res, err := rui.CallTool(ctxT(t), &sdk.CallToolParams{Name: "hello"})
	if err != nil || res.IsError {
		t.Fatalf("rui may run hello: %v %+v", err, res)
	}
	res, err = rui.CallTool(ctxT(t), &sdk.CallToolParams{Name: "count"})
	if err != nil {
		t.Fatal(err)
	}
	if text := res.Content[0].(*sdk.TextContent).Text; !res.IsError || !strings.Contains(text, `may run only the functions matching "hel*"`) {
		t.Fatalf("rui's call of count: isError %t %q; want refused naming the glob", res.IsError, text)
	}
	if res.Meta["job_id"] != nil {
		t.Fatalf("a refused call made job %v", res.Meta["job_id"])
	}
	// A client that sends the guard's header itself, claiming admin, is still rui.
	forged := sdk.NewClient(&sdk.Implementation{Name: "forger", Version: "1"}, nil)
	tr := &sdk.StreamableClientTransport{Endpoint: srv.URL + "/mcp", HTTPClient: &http.Client{Transport: forge{bearer{runnerToken, http.DefaultTransport}}}}
	fs, err := forged.Connect(ctxT(t), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	if res, err := fs.CallTool(ctxT(t), &sdk.CallToolParams{Name: "count"}); err != nil || !res.IsError {
		t.Fatalf("a forged principal header let rui call count: %v %+v", err, res)
	}
	// A viewer does not get a session at all; the operator's token (admin) calls everything.
	viewer := sdk.NewClient(&sdk.Implementation{Name: "viewer", Version: "1"}, nil)
	vt := &sdk.StreamableClientTransport{Endpoint: srv.URL + "/mcp", HTTPClient: &http.Client{Transport: bearer{viewerToken, http.DefaultTransport}}}
	if vs, err := viewer.Connect(ctxT(t), vt, nil); err == nil {
		vs.Close()
		t.Fatal("a viewer opened an MCP session, which runs functions")
	}
	admin := connect(t, srv, nil)
	if tools := toolsByName(t, admin); tools["count"] == nil || tools["hello"] == nil {
		t.Fatalf("the operator's tools/list: %v; want every tool", tools)
	}
	if res, err := admin.CallTool(ctxT(t), &sdk.CallToolParams{Name: "count"}); err != nil || res.IsError {
		t.Fatalf("the operator's call of count: %v %+v", err, res)
	}
}

// forge sends the guard's principal header as a client, claiming to be the admin.
type forge struct{ next http.RoundTripper }

func (f forge) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Agent-Host-Principal", `{"name":"root","role":"admin"}`)
	return f.next.RoundTrip(r)
}
