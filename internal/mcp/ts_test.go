package mcp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// tsClient is the directory of the TypeScript client: the official SDK, installed by
// scripts/setup (or here, the first time) from its package-lock.json.
const tsClient = "testdata/tsclient"

// requireTSClient finds node and the SDK, installing the SDK when it is missing.
func requireTSClient(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("SKIPPED LOUDLY: node is not installed; scripts/setup expects it (the TypeScript SDK client runs on it)")
	}
	if _, err := os.Stat(filepath.Join(tsClient, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err != nil {
		cmd := exec.Command("npm", "ci", "--silent", "--no-audit", "--no-fund")
		cmd.Dir = tsClient
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("install the MCP TypeScript SDK (npm ci in %s; scripts/setup does it too): %v\n%s", tsClient, err, out)
		}
	}
	return node
}

// A client nobody here wrote, the official TypeScript SDK over StreamableHTTPClientTransport,
// run by Node: initialize, list, call, read the structured result and the progress.
func TestTypeScriptClient(t *testing.T) {
	node := requireTSClient(t)
	runs := hosttest.NewRuns().On("wordcount", func(_ context.Context, j *jobtype.Job) *jobtype.Outcome {
		j.Log("stdout", []byte("counted 2 distinct words"))
		return &jobtype.Outcome{Result: []byte(`{"words":3,"top":[{"word":"a","count":2}]}`)}
	})
	files := examples(t, "wordcount.ts")
	files["wordcount.ts"] = "// tool: Counts the words of a text\n" + files["wordcount.ts"]
	h := hosttest.NewEngine(t, files, runs)
	srv := serve(t, h, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "client.mjs", srv.URL+"/mcp", testToken, "wordcount", `{"text":"a b a"}`)
	cmd.Dir = tsClient
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node client.mjs: %v\n%s", err, stderr.String())
	}
	var got struct {
		Server   struct{ Name string }
		Protocol string
		Tools    []struct {
			Name        string
			Description string
			InputSchema json.RawMessage
		}
		Result struct {
			IsError           bool
			StructuredContent json.RawMessage
			Content           []struct{ Type, Text string }
			Meta              map[string]any `json:"_meta"`
		}
		Progress []string
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("the client's report %s: %v", out, err)
	}
	if got.Server.Name != "agent-host" || got.Protocol == "" {
		t.Errorf("server %q, protocol %q: the initialize did not come through", got.Server.Name, got.Protocol)
	}
	if len(got.Tools) != 1 || got.Tools[0].Name != "wordcount" || got.Tools[0].Description != "Counts the words of a text" ||
		normJSON(t, string(got.Tools[0].InputSchema)) != normJSON(t, `{"type":"object","properties":{"text":{"type":"string"},"top":{"type":"number","default":3}},"required":["text"]}`) {
		t.Errorf("tools = %+v", got.Tools)
	}
	want := `{"words":3,"top":[{"word":"a","count":2}]}`
	if got.Result.IsError || normJSON(t, string(got.Result.StructuredContent)) != normJSON(t, want) ||
		len(got.Result.Content) != 1 || got.Result.Content[0].Type != "text" || normJSON(t, got.Result.Content[0].Text) != normJSON(t, want) {
		t.Errorf("result = %+v, want %s structured and as text", got.Result, want)
	}
	if !reflect.DeepEqual(got.Progress, []string{"counted 2 distinct words"}) {
		t.Errorf("progress = %q, want the job's log line", got.Progress)
	}
	id, _ := got.Result.Meta["job_id"].(string)
	if rec := h.Record(id); rec.Status != jobtype.Succeeded || !strings.HasPrefix(rec.Caller, "mcp ts-sdk-test/0.0.1") {
		t.Errorf("job %q: %s by %q, want succeeded by the TypeScript client", id, rec.Status, rec.Caller)
	}
}

// A client that disconnects in the middle of a call (the TypeScript SDK's process killed once
// the job has logged its first line, so no notifications/cancelled is sent) cancels the call's
// job, as an abort does: the job, sleeping in its jail, ends canceled and says by whom, instead
// of running on to succeeded for nobody.
func TestClientThatDisconnectsCancelsItsCall(t *testing.T) {
	node := requireTSClient(t)
	h := hosttest.New(t, map[string]string{"slow.sh": "# sandbox\n# tool: Takes its time\necho working >&2\nsleep 600\necho '\"done\"'\n"})
	srv := serve(t, h, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "disconnect.mjs", srv.URL+"/mcp", testToken, "slow")
	cmd.Dir = tsClient
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if !strings.HasPrefix(line, "started working") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the client did not see the job start: %q, %v\n%s", line, err, stderr.String())
	}
	// Gone without a word, as a killed agent is.
	cmd.Process.Kill()
	cmd.Wait()

	recent, err := h.Store.Recent(ctx, jobs.Filter{Function: "slow"}, 0)
	if err != nil || len(recent) != 1 {
		t.Fatalf("jobs of slow: %v, %v; want the one call's", recent, err)
	}
	rec := h.Record(recent[0].ID)
	if rec.Status != jobtype.Canceled || !strings.Contains(rec.Error, "MCP cancellation") || !strings.HasPrefix(rec.Caller, "mcp ts-sdk-gone") {
		t.Fatalf("job %s of a client that went away: %s (%q), caller %q; want canceled by the MCP client", rec.ID, rec.Status, rec.Error, rec.Caller)
	}
}
