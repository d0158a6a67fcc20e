package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/runtimes"
)

// pythonFunction writes a sandboxed Python function into its own snapshot directory.
func pythonFunction(t *testing.T, root, name, dirName, src string) (*functions.Function, string) {
	t.Helper()
	code := filepath.Join(root, dirName)
	if err := os.Mkdir(code, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(code, name+".py"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return &functions.Function{Name: name, Entry: name + ".py", Runtime: runtimes.Python, Hash: dirName,
		Spec: &annot.Spec{Sandbox: true, Network: annot.Network{Mode: annot.NetworkNone}}}, code
}

// waitTemplate waits until fn's template serves, or fails the test.
func waitTemplate(t *testing.T, r *Runner, fn *functions.Function, code string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for r.forks.take(fn, code) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("no template of %s within a minute", fn.Name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func runJobOf(t *testing.T, r *Runner, fn *functions.Function, code, id, payload string) *jobtype.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, _ := r.Run(ctx, fn, code, &jobtype.Job{ID: id, Payload: []byte(payload)})
	return out
}

// TestForkRun: with Fork, a sandboxed Python function's jobs are forks of its template: they
// get their arguments and environment, say how they were served, keep no warm jail; a reloaded
// version gets a template of its own, and its jobs run the new code.
func TestForkRun(t *testing.T) {
	r, dir := newJailRunner(t, WarmConfig{PerFunction: 1})
	r.cfg.Fork = true
	src := "import os\n\ndef main(name):\n    return {'v': 1, 'name': name, 'job': os.environ['JOB_ID'], 'pid': os.getpid()}\n"
	fn, code := pythonFunction(t, dir, "greet", "v1", src)
	r.Warm(fn, code)
	waitTemplate(t, r, fn, code)
	if _, waiting := r.warm.counts(); waiting[fn.Name] != 0 {
		t.Errorf("a forked function keeps %d warm jails", waiting[fn.Name])
	}
	for i := range 3 {
		out := runJobOf(t, r, fn, code, fmt.Sprintf("job%d", i), `{"name":"Ada"}`)
		if out.Err != nil {
			t.Fatalf("%d: %v (stderr %s)", i, out.Err, out.StderrTail)
		}
		if want := fmt.Sprintf(`{"v":1,"name":"Ada","job":"job%d","pid":1}`, i); string(out.Result) != want {
			t.Fatalf("%d: result %s, want %s", i, out.Result, want)
		}
		if out.Served != ServedFork {
			t.Fatalf("%d: served %q, want fork", i, out.Served)
		}
	}
	if got := counterValue(r.forks.m.served.WithLabelValues(fn.Name, ServedFork)); got != 3 {
		t.Errorf("host_jobs_served_total{how=fork} = %v, want 3", got)
	}
	old := r.forks.take(fn, code)

	v2, code2 := pythonFunction(t, dir, "greet", "v2", "def main(name):\n    return {'v': 2}\n")
	r.Warm(v2, code2)
	waitTemplate(t, r, v2, code2)
	if r.forks.take(v2, code2) == old {
		t.Fatal("the reloaded function kept its old template")
	}
	select {
	case <-old.Gone():
	case <-time.After(10 * time.Second):
		t.Fatal("the old version's template is still there")
	}
	if out := runJobOf(t, r, v2, code2, "job-v2", `{"name":"x"}`); out.Err != nil || string(out.Result) != `{"v":2}` || out.Served != ServedFork {
		t.Fatalf("after reload: %s, %v, served %q", out.Result, out.Err, out.Served)
	}
	r.Cool(v2.Name)
	if r.forks.take(v2, code2) != nil {
		t.Fatal("Cool left a template")
	}
}

// TestForkFallsBack: a function the template cannot serve runs warm or cold, and says so.
func TestForkFallsBack(t *testing.T) {
	r, dir := newJailRunner(t, WarmConfig{PerFunction: 1})
	r.cfg.Fork = true
	bash, bashCode := bashFunction(t, dir, "sh", "echo '\"ok\"'\n", 0)
	py, pyCode := pythonFunction(t, dir, "envpy", "envpy", "def main():\n    return 'ok'\n")
	py.Spec.Env = []annot.Env{{Name: "PYTHONHASHSEED", Value: "0"}}
	zero := 0
	cold, coldCode := pythonFunction(t, dir, "coldpy", "coldpy", "def main():\n    return 'ok'\n")
	cold.Spec.Warm = &zero
	for _, c := range []struct {
		fn         *functions.Function
		code, want string
	}{{bash, bashCode, ServedWarm}, {py, pyCode, ServedWarm}, {cold, coldCode, ServedCold}} {
		if r.forkable(c.fn) == "" && c.fn != cold {
			t.Errorf("%s: forkable, want a reason it is not", c.fn.Name)
		}
		r.Warm(c.fn, c.code)
		if c.want == ServedWarm {
			waitReady(t, r, c.fn.Name)
		}
		out := runJobOf(t, r, c.fn, c.code, "j-"+c.fn.Name, "{}")
		if out.Err != nil || string(out.Result) != `"ok"` || out.Served != c.want {
			t.Errorf("%s: %s, %v, served %q, want %s", c.fn.Name, out.Result, out.Err, out.Served, c.want)
		}
		if r.forks.take(c.fn, c.code) != nil {
			t.Errorf("%s has a template", c.fn.Name)
		}
	}
}

// TestForkTemplateGone: jobs of a function whose template died run cold (nothing of them
// reached it), and the template is started again.
func TestForkTemplateGone(t *testing.T) {
	r, dir := newJailRunner(t, WarmConfig{PerFunction: 1})
	r.cfg.Fork = true
	fn, code := pythonFunction(t, dir, "again", "again", "def main():\n    return 'ok'\n")
	r.Warm(fn, code)
	waitTemplate(t, r, fn, code)
	tmpl := r.forks.take(fn, code)
	for _, pid := range tmpl.Pids() {
		if p, err := os.FindProcess(pid); err == nil {
			p.Kill()
		}
	}
	<-tmpl.Gone()
	// Taken before the pool noticed, or after: either way the job runs.
	out := runJobOf(t, r, fn, code, "after-death", "{}")
	if out.Err != nil || string(out.Result) != `"ok"` || out.Served == ServedFork {
		t.Fatalf("with the template dead: %s, %v, served %q", out.Result, out.Err, out.Served)
	}
	waitTemplate(t, r, fn, code)
	if r.forks.take(fn, code) == tmpl {
		t.Fatal("the dead template is still taken")
	}
	if out := runJobOf(t, r, fn, code, "restarted", "{}"); out.Err != nil || out.Served != ServedFork {
		t.Fatalf("after the restart: %v, served %q", out.Err, out.Served)
	}
}
