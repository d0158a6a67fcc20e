package mcp_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// agentPy is callerPy's rpc with a main of the test's: it calls tool with arguments through
// the job's own MCP endpoint, as an agent in the jail would, and returns the tools/call answer.
func agentPy(annotations, tool, arguments string) string {
	rpc := callerPy[strings.Index(callerPy, "import json"):strings.Index(callerPy, "def main():")]
	return annotations + rpc + `
def main():
    sid, _ = rpc(None, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "in-jail", "version": "1"}})
    rpc(sid, "notifications/initialized", id=None)
    _, called = rpc(sid, "tools/call", {"name": "` + tool + `", "arguments": json.loads('` + arguments + `')}, id=2)
    return called
`
}

// revealPy declares s1 and hands back its argument reversed: a tool that transforms what it
// gets, so that the redaction of the value (in its plain and encoded forms) does not hide it.
const revealPy = "# secrets: s1\n\ndef main(text):\n    return {\"rev\": text[::-1]}\n"

// The red team's finding (issue 37, item 3): an agent whose function declares no secrets must
// not get one through a tool that declares it. A tool call acts with the caller's rights: its
// $secret: is refused, naming the secret, and the value is nowhere in what the agent gets.
func TestAttackAgentPullsSecretThroughItsTool(t *testing.T) {
	const value = "hunter2-the-s1-value"
	h := hosttest.New(t, map[string]string{
		"reveal.py":  revealPy,
		"agent.py":   agentPy("# sandbox\n# tools: reveal\n", "reveal", `{"text": "$secret:s1"}`),
		"trusted.py": agentPy("# sandbox\n# tools: reveal\n# secrets: s1\n", "reveal", `{"text": "$secret:s1"}`),
	})
	h.SetSecret("s1", `"`+value+`"`)
	reversed := []byte(value)
	slices.Reverse(reversed)
	leaks := []string{value, string(reversed)}

	reply := h.Call("agent", "{}")
	if st := reply.Header.Get(bus.HeaderJobStatus); st != "succeeded" {
		t.Fatalf("agent: %s %s", st, reply.Data)
	}
	var called struct {
		Result struct {
			IsError bool
			Content []struct{ Text string }
		}
	}
	if err := json.Unmarshal(reply.Data, &called); err != nil {
		t.Fatalf("agent's result %s: %v", reply.Data, err)
	}
	if !called.Result.IsError || len(called.Result.Content) == 0 || !strings.Contains(called.Result.Content[0].Text, `"s1"`) {
		t.Errorf("the agent's call of reveal with $secret:s1 answered %s, want isError naming s1", reply.Data)
	}
	c, err := client.New(ctxT(t), h.NC)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := c.Logs(ctxT(t), reply.Header.Get(bus.HeaderJobID))
	if err != nil {
		t.Fatal(err)
	}
	seen := string(reply.Data)
	for _, l := range lines {
		seen += "\n" + l.Text
	}
	for _, leak := range leaks {
		if strings.Contains(seen, leak) {
			t.Errorf("the agent got s1's value (%q) in its result or log:\n%s", leak, seen)
		}
	}

	// The host that runs a call checks it too, from the calling job's record: a tool call
	// that names the agent's job as its parent, published past the endpoint, is refused the same.
	m := nats.NewMsg(bus.CallSubject("reveal"))
	m.Header.Set(bus.HeaderParentJob, reply.Header.Get(bus.HeaderJobID))
	m.Header.Set(bus.HeaderToolDepth, "1")
	direct := h.CallMsg(m, `{"text": "$secret:s1"}`)
	if st := direct.Header.Get(bus.HeaderJobStatus); st != "failed" || !strings.Contains(string(direct.Data), `secret \"s1\" refused`) ||
		strings.Contains(string(direct.Data), leaks[1]) {
		t.Errorf("a call of reveal naming the agent's job as its parent: %s %s, want it refused naming s1", st, direct.Data)
	}

	// An agent that declares s1 itself may pass it on.
	reply = h.Call("trusted", "{}")
	called.Result.IsError, called.Result.Content = false, nil
	if err := json.Unmarshal(reply.Data, &called); err != nil {
		t.Fatalf("trusted's result %s: %v", reply.Data, err)
	}
	if called.Result.IsError || len(called.Result.Content) == 0 || !strings.Contains(called.Result.Content[0].Text, leaks[1]) {
		t.Errorf("an agent declaring s1 called reveal with $secret:s1: %s, want its value reversed", reply.Data)
	}
}

// The bound on nested tool calls (issue 37, item 4): t0 calls t1 calls t2 calls t3, each
// through its tools:, acyclic, with the bound set to 2: the third nested call is refused,
// naming the bound, and the refusal comes back up the chain as the tool call's error.
func TestToolCallsNestedPastTheBoundAreRefused(t *testing.T) {
	files := map[string]string{
		"t3.py": "def main():\n    return {\"deepest\": True}\n",
	}
	for i, next := range []string{"t1", "t2", "t3"} {
		files["t"+string(rune('0'+i))+".py"] = agentPy("# sandbox\n# tools: "+next+"\n", next, `{}`)
	}
	h := hosttest.New(t, files, func(c *app.Config) { c.MaxToolDepth = 2 })
	reply := h.Call("t0", "{}")
	if st := reply.Header.Get(bus.HeaderJobStatus); st != "succeeded" {
		t.Fatalf("t0: %s %s", st, reply.Data)
	}
	got := string(reply.Data)
	if strings.Contains(got, "deepest") || !strings.Contains(got, "past the bound of 2 nested tool calls") {
		t.Errorf("t0 -> t1 -> t2 -> t3 with a bound of 2 answered %s, want t2's call of t3 refused naming the bound", got)
	}
}

// A job that times out while its tool call still waits for a run slot of the tool (here: the
// tool's one slot is held by a job that runs for long) would wait the same way when retried:
// its timeout is final, and says why (issue 37, item 4).
func TestTimeoutWaitingOnAQueuedToolCallIsFinal(t *testing.T) {
	h := hosttest.New(t, map[string]string{
		"busy.sh":   "# sandbox\n# concurrency: 1\nsleep 300\necho '{}'\n",
		"waiter.py": agentPy("# sandbox\n# tools: busy\n# timeout: 10s\n# retries: 1\n", "busy", `{}`),
	})
	c, err := client.New(ctxT(t), h.NC)
	if err != nil {
		t.Fatal(err)
	}
	const holder = "busy-holds-the-slot"
	if err := c.Invoke(ctxT(t), "busy", holder, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Cancel(context.Background(), holder) })
	h.Eventually("busy's one slot is taken", func() bool {
		rec, err := h.Store.Get(ctxT(t), holder)
		return err == nil && rec.Status == jobtype.Running
	})

	reply := h.Call("waiter", "{}")
	id := reply.Header.Get(bus.HeaderJobID)
	rec := h.Record(id)
	if rec.Status != jobtype.Failed || rec.Attempts != 1 || !strings.Contains(rec.Error, "timeout") || !strings.Contains(rec.Error, "had not started") {
		t.Errorf("waiter, timed out waiting on its call of busy: %s after %d attempts: %s; want failed at once, saying its call had not started", rec.Status, rec.Attempts, rec.Error)
	}
}
