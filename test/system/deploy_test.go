package system_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/check"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/deploy"
	"github.com/agenthost/host/internal/host"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// deployFiles writes files into a fresh directory and deploys it as `host deploy` does: checked
// first, nothing stored when anything is refused (the refusals are returned).
func deployFiles(t *testing.T, h *hosttest.H, files map[string]string, msg string) (*deploy.Deployment, []error) {
	t.Helper()
	dir, err := os.MkdirTemp(h.Dir, "src-")
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	fns, errs, _ := check.Dir(ctx, dir, check.Options{}, nil)
	if len(errs) > 0 {
		return nil, errs
	}
	st := deployments(t, h)
	d, _, err := st.Deploy(ctx, deploy.Request{Functions: fns, By: "tester", Message: msg})
	if err != nil {
		t.Fatal(err)
	}
	return d, nil
}

func deployments(t *testing.T, h *hosttest.H) *deploy.Store {
	t.Helper()
	js, err := jetstream.New(h.NC)
	if err != nil {
		t.Fatal(err)
	}
	st, err := deploy.Open(context.Background(), js, 0)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func deployed(c *app.Config) { c.Deployed = true }

// converge waits until every host serves deployment n and returns how long that took.
func converge(t *testing.T, n int, hosts ...*host.Host) time.Duration {
	t.Helper()
	began := time.Now()
	for time.Since(began) < 30*time.Second {
		all := true
		for _, x := range hosts {
			all = all && x.Deployment() == n
		}
		if all {
			return time.Since(began)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("the hosts did not all serve deployment %d within 30 s", n)
	return 0
}

func version(v int) map[string]string {
	return map[string]string{"ver.py": fmt.Sprintf("def main():\n    return {\"v\": %d}\n", v)}
}

func TestDeployReachesEveryHost(t *testing.T) {
	h := hosttest.New(t, nil, deployed)
	second := h.AddHost(t, deployed)
	ctx := context.Background()
	if h.Host.Deployment() != 0 {
		t.Fatalf("serving deployment %d before any deploy", h.Host.Deployment())
	}

	d1, _ := deployFiles(t, h, version(1), "first")
	took1 := converge(t, d1.Number, h.Host, second)
	d2, _ := deployFiles(t, h, version(2), "second")
	took2 := converge(t, d2.Number, h.Host, second)
	t.Logf("MEASURED: deployment 1 reached both hosts %v after it was stored, deployment 2 %v", took1, took2)
	// Every call, whichever host takes it, runs the new code.
	for range 6 {
		if got := string(h.Call("ver", "{}").Data); got != `{"v":2}` {
			t.Fatalf("after deploying 2 a call answered %s", got)
		}
	}

	// A refused set changes nothing.
	if _, errs := deployFiles(t, h, map[string]string{"ver.py": "def main(:\n    return 3\n"}, "broken"); len(errs) != 1 || !strings.Contains(errs[0].Error(), "ver.py:1:") {
		t.Fatalf("a broken set: refusals %v, want one naming ver.py:1", errs)
	}
	if cur, err := deployments(t, h).Current(ctx); err != nil || cur.Number != d2.Number {
		t.Fatalf("after a refused deploy current is %+v (%v), want %d", cur, err, d2.Number)
	}

	// Rollback: a new deployment equal to 1, served everywhere.
	d3, stored, err := deployments(t, h).Rollback(ctx, d1.Number, "tester")
	if err != nil || !stored || d3.Number != 3 {
		t.Fatalf("rollback: %+v %v", d3, err)
	}
	converge(t, d3.Number, h.Host, second)
	for range 4 {
		if got := string(h.Call("ver", "{}").Data); got != `{"v":1}` {
			t.Fatalf("after rolling back to 1 a call answered %s", got)
		}
	}

	// A host started after the deploy serves the current one from its start.
	third := h.AddHost(t, deployed, func(c *app.Config) { c.HostID = "test-3"; c.DataDir = filepath.Join(h.Dir, "data3") })
	if third.Deployment() != d3.Number {
		t.Fatalf("a host started later serves deployment %d, want %d", third.Deployment(), d3.Number)
	}

	// host functions says which deployment each host serves.
	c, err := client.New(ctx, h.NC)
	if err != nil {
		t.Fatal(err)
	}
	fns, err := c.Functions(ctx)
	if err != nil || len(fns) != 1 || len(fns[0].Hosts) != 3 || fmt.Sprint(fns[0].Deployments) != "[3]" {
		t.Fatalf("host functions: %+v %v", fns, err)
	}
}

// A host whose deployment's packages do not install keeps serving the last one, and says why.
func TestDeployThatCannotInstallKeepsTheLastOne(t *testing.T) {
	h := hosttest.New(t, nil, deployed)
	d1, _ := deployFiles(t, h, version(1), "")
	converge(t, d1.Number, h.Host)
	dir, _ := os.MkdirTemp(h.Dir, "src-")
	os.MkdirAll(filepath.Join(dir, "ver"), 0o755)
	os.WriteFile(filepath.Join(dir, "ver", "main.py"), []byte("def main():\n    return {\"v\": 2}\n"), 0o644)
	// A local path is refused by check; a package no index has fails at install.
	os.WriteFile(filepath.Join(dir, "ver", "requirements.txt"), []byte("no-such-package-agenthost-test==9.9.9\n"), 0o644)
	fns, errs, _ := check.Dir(context.Background(), dir, check.Options{}, nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	d2, _, err := deployments(t, h).Deploy(context.Background(), deploy.Request{Functions: fns, By: "tester"})
	if err != nil {
		t.Fatal(err)
	}
	e := h.WaitLog("cannot serve the new deployment; the last one keeps serving, and it is tried again", 0)
	if !strings.Contains(fmt.Sprint(e.ContextMap()), "install the packages of ver") {
		t.Fatalf("the host says %v, want the install failure", e.ContextMap())
	}
	if h.Host.Deployment() != d1.Number {
		t.Fatalf("serving %d after deployment %d failed to install, want %d", h.Host.Deployment(), d2.Number, d1.Number)
	}
	if got := string(h.Call("ver", "{}").Data); got != `{"v":1}` {
		t.Fatalf("a call answered %s, want the last good deployment's", got)
	}
	// host functions says why: the function's entry carries the host's switch error.
	switchErrorSays(t, h, "ver", fmt.Sprintf("deployment %d not served, deployment %d still is", d2.Number, d1.Number), "install the packages of ver")
}

// switchErrorSays waits until `host functions` (client.Functions) shows fn served by the
// hosts with a switch error saying each of want.
func switchErrorSays(t *testing.T, h *hosttest.H, fn string, want ...string) {
	t.Helper()
	ctx := context.Background()
	c, err := client.New(ctx, h.NC)
	if err != nil {
		t.Fatal(err)
	}
	var last []string
	h.Eventually("host functions shows why the host did not switch", func() bool {
		fns, err := c.Functions(ctx)
		if err != nil {
			return false
		}
		for _, f := range fns {
			if f.Name != fn || len(f.SwitchErrors) != 1 {
				continue
			}
			last = f.SwitchErrors
			for _, w := range want {
				if !strings.Contains(f.SwitchErrors[0], w) {
					return false
				}
			}
			return strings.HasPrefix(f.SwitchErrors[0], "test: ")
		}
		return false
	})
	t.Logf("host functions says: %v", last)
}

// A broken edit in a served directory keeps the last good version serving; host functions shows
// the refusal; a refused new file is not served, and is listed with its error.
func TestBrokenEditKeepsTheLastGoodVersion(t *testing.T) {
	h := hosttest.New(t, version(1))
	if got := string(h.Call("ver", "{}").Data); got != `{"v":1}` {
		t.Fatalf("first call: %s", got)
	}
	h.Write("ver.py", "def main(:\n    return {\"v\": 2}\n")
	h.Write("other.py", "def mian():\n    return 1\n")
	h.Eventually("both refusals noted", func() bool { return len(h.Host.Refusals()) == 2 })
	if got := string(h.Call("ver", "{}").Data); got != `{"v":1}` {
		t.Fatalf("while its file is broken the function answered %s, want the last good version", got)
	}
	ctx := context.Background()
	c, err := client.New(ctx, h.NC)
	if err != nil {
		t.Fatal(err)
	}
	var ver, other *client.Function
	h.Eventually("host functions lists the refusals", func() bool {
		fns, err := c.Functions(ctx)
		if err != nil {
			return false
		}
		ver, other = nil, nil
		for _, f := range fns {
			switch f.Name {
			case "ver":
				ver = f
			case "other":
				other = f
			}
		}
		return ver != nil && other != nil && len(ver.Refused) == 1 && len(other.Refused) == 1
	})
	if !strings.Contains(ver.Refused[0], "ver.py:1:") || len(ver.Versions) != 1 {
		t.Fatalf("ver: %+v", ver)
	}
	if !strings.Contains(other.Refused[0], "defines no top-level main") || len(other.Versions) != 0 {
		t.Fatalf("other: %+v", other)
	}
	// A call of the refused function is refused naming the file and line.
	if reply := h.Call("other", "{}"); !strings.Contains(string(reply.Data), "its file is refused") || !strings.Contains(string(reply.Data), "other.py defines no top-level main") {
		t.Fatalf("a call of a refused function answered %s", reply.Data)
	}
	// Fixed, the new version serves and the refusal is gone.
	h.Write("ver.py", "def main():\n    return {\"v\": 3}\n")
	h.Eventually("the fixed file is served", func() bool { return string(h.Call("ver", "{}").Data) == `{"v":3}` })
	for _, r := range h.Host.Refusals() {
		if r.Function == "ver" {
			t.Fatalf("still refused after the fix: %+v", r)
		}
	}
}

// A corrupt object reaching a host (its content does not hash to the version the deployment
// names) is not served: the host keeps its last good deployment, and says why in its log and in
// `host functions`.
func TestCorruptObjectKeepsTheLastGoodDeployment(t *testing.T) {
	h := hosttest.New(t, nil, deployed)
	ctx := context.Background()
	d1, _ := deployFiles(t, h, version(1), "one")
	converge(t, d1.Number, h.Host)
	// The object deployment 2 will name is there already, holding other code: a deploy stores
	// only the objects missing, so deployment 2 points at it.
	dir, _ := os.MkdirTemp(h.Dir, "src-")
	os.WriteFile(filepath.Join(dir, "ver.py"), []byte("def main():\n    return {\"v\": 2}\n"), 0o644)
	v2, _, _ := check.Dir(ctx, dir, check.Options{}, nil)
	os.WriteFile(filepath.Join(dir, "ver.py"), []byte("def main():\n    return {\"v\": 666}\n"), 0o644)
	evil, _, _ := check.Dir(ctx, dir, check.Options{}, nil)
	packed, err := deploy.Pack(evil["ver"])
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(h.NC)
	code, err := js.ObjectStore(ctx, deploy.CodeBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := code.PutBytes(ctx, "ver/"+v2["ver"].Hash, packed); err != nil {
		t.Fatal(err)
	}
	d2, _, err := deployments(t, h).Deploy(ctx, deploy.Request{Functions: v2, By: "tester"})
	if err != nil {
		t.Fatal(err)
	}
	e := h.WaitLog("cannot serve the new deployment; the last one keeps serving, and it is tried again", 0)
	if !strings.Contains(fmt.Sprint(e.ContextMap()), "the object is corrupt") {
		t.Fatalf("the host says %v, want the corrupt object named", e.ContextMap())
	}
	if h.Host.Deployment() != d1.Number {
		t.Fatalf("serving %d after deployment %d's object was corrupt, want %d", h.Host.Deployment(), d2.Number, d1.Number)
	}
	if got := string(h.Call("ver", "{}").Data); got != `{"v":1}` {
		t.Fatalf("a call answered %s, want the last good deployment's", got)
	}
	switchErrorSays(t, h, "ver", fmt.Sprintf("deployment %d not served, deployment %d still is", d2.Number, d1.Number), "the object is corrupt")
}
