package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/host/internal/runtimes"
)

// probeScript is the function the fork tests serve: it runs the bash script or the Python
// code it is given, and returns what came of it.
const probeScript = `import subprocess

def main(sh=None, py=None):
    if sh is not None:
        p = subprocess.run(["bash", "-c", "set -u; " + sh], capture_output=True, text=True)
        return {"code": p.returncode, "out": p.stdout, "err": p.stderr}
    ns = {}
    exec(py, ns)
    return ns.get("result")
`

// forkHarness is a template of the probe function, as the runner lays one out.
type forkHarness struct {
	b        *Bwrap
	tmpl     *Template
	jobArgv  []string
	mounts   []Mount
	codeDir  string
	tmplOut  *markerWriter
	tmplErrs *bytes.Buffer
}

const forkIODir = "/io"

func newForkHarness(t *testing.T, b *Bwrap, network Network, script string) *forkHarness {
	t.Helper()
	shimDir := testDir(t, b, false)
	if err := runtimes.WriteShims(shimDir); err != nil {
		t.Fatal(err)
	}
	codeDir := testDir(t, b, false)
	writeFile(t, filepath.Join(codeDir, "probe.py"), script, 0o644)
	paths := runtimes.Paths{Script: "/fn/probe.py", ShimDir: "/shim", IODir: forkIODir}
	tcmd, err := runtimes.BuildTemplate(runtimes.Python, paths)
	if err != nil {
		t.Fatal(err)
	}
	jcmd, err := runtimes.Build(runtimes.Python, paths, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &forkHarness{b: b, jobArgv: jcmd.Argv, codeDir: codeDir, tmplOut: &markerWriter{marker: "host-ready", fn: func() {}}, tmplErrs: &bytes.Buffer{},
		mounts: []Mount{{Source: codeDir, Target: "/fn"}, {Source: shimDir, Target: "/shim"}}}
	ts := &TemplateSpec{
		Spec: Spec{Argv: tcmd.Argv, Env: append([]string{"LANG=C.UTF-8"}, tcmd.Env...), Mounts: h.mounts, Network: network,
			Stdout: h.tmplOut, Stderr: &lockedBuffer{b: h.tmplErrs}},
		JobArgv: jcmd.Argv, Slots: []string{forkIODir},
	}
	h.tmpl, err = b.StartTemplate(context.Background(), ts)
	if err != nil {
		t.Fatalf("StartTemplate: %v", err)
	}
	t.Cleanup(h.tmpl.Close)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(h.tmplOut.String(), "host-ready") {
		select {
		case <-h.tmpl.Gone():
			t.Fatalf("the template ended before it was ready: %+v\nstderr:\n%s", h.tmpl.Result(), h.tmplErrs.String())
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the template did not say it is ready\nstderr:\n%s", h.tmplErrs.String())
		}
	}
	return h
}

type lockedBuffer struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// forkJob is one job laid out for the harness's template: its /job and io directories.
type forkJob struct {
	workDir, ioDir string
	spec           *Spec
	stdout, stderr bytes.Buffer
}

func (h *forkHarness) job(t *testing.T, args map[string]any, env ...string) *forkJob {
	t.Helper()
	j := &forkJob{workDir: testDir(t, h.b, true), ioDir: testDir(t, h.b, true)}
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(j.ioDir, runtimes.ArgsFile), string(raw), 0o644)
	j.spec = &Spec{Argv: h.jobArgv, WorkDir: j.workDir, Network: h.tmpl.spec.Network,
		Env:    append([]string{"LANG=C.UTF-8", "PYTHONUTF8=1", "PYTHONIOENCODING=utf-8"}, env...),
		Mounts: append(append([]Mount{}, h.mounts...), Mount{Source: j.ioDir, Target: forkIODir, Writable: true})}
	j.spec.Stdout, j.spec.Stderr = &j.stdout, &j.stderr
	return j
}

// run forks j and returns how it ended and its result.json (nil without one).
func (h *forkHarness) run(t *testing.T, j *forkJob) (*Result, json.RawMessage) {
	t.Helper()
	res, err := Run(context.Background(), h.tmpl, j.spec)
	if err != nil {
		t.Fatalf("fork: %v\ntemplate stderr:\n%s", err, h.tmplErrs.String())
	}
	data, err := os.ReadFile(filepath.Join(j.ioDir, runtimes.ResultFile))
	if err != nil {
		return res, nil
	}
	return res, data
}

// sh runs a bash script in a fork and fails the test unless it exits 0.
func (h *forkHarness) sh(t *testing.T, script string, env ...string) string {
	t.Helper()
	j := h.job(t, map[string]any{"sh": script}, env...)
	res, raw := h.run(t, j)
	var out struct {
		Code     int
		Out, Err string
	}
	if res.ExitCode != 0 || json.Unmarshal(raw, &out) != nil {
		t.Fatalf("the fork ended with %+v, result %s\nstdout:\n%s\nstderr:\n%s\ntemplate stderr:\n%s", res, raw, j.stdout.String(), j.stderr.String(), h.tmplErrs.String())
	}
	if out.Code != 0 {
		t.Errorf("script exited %d\n%s\nstdout:\n%s\nstderr:\n%s", out.Code, script, out.Out, out.Err)
	}
	return out.Out
}

func TestForkServesJobs(t *testing.T) {
	b := newTestBwrap(t)
	h := newForkHarness(t, b, NetworkNone, probeScript)
	for i := range 3 {
		j := h.job(t, map[string]any{"py": fmt.Sprintf("result = %d * 7", i)})
		res, raw := h.run(t, j)
		if res.ExitCode != 0 || string(raw) != strconv.Itoa(i*7) {
			t.Fatalf("job %d: %+v, result %s\nstderr:\n%s", i, res, raw, j.stderr.String())
		}
	}
	// Each job's stdout is its own, and its environment is what its spec says.
	j := h.job(t, map[string]any{"py": "import os; print('from the job'); result = os.environ.get('JOB_ONLY')"}, "JOB_ONLY=x1")
	res, raw := h.run(t, j)
	if res.ExitCode != 0 || string(raw) != `"x1"` || !strings.Contains(j.stdout.String(), "from the job") {
		t.Fatalf("%+v, result %s, stdout %q", res, raw, j.stdout.String())
	}
}

// TestForkBadSpec: a job that asks for what its template was not built for is refused before
// anything of it reaches a process, with ErrForkUnfit.
func TestForkBadSpec(t *testing.T) {
	b := newTestBwrap(t)
	h := newForkHarness(t, b, NetworkNone, probeScript)
	cases := map[string]func(s *Spec){
		"other command":        func(s *Spec) { s.Argv = []string{"bash", "-c", "true"} },
		"other network":        func(s *Spec) { s.Network = NetworkHost },
		"missing read-only":    func(s *Spec) { s.Mounts = s.Mounts[1:] },
		"writable at no slot":  func(s *Spec) { s.Mounts[len(s.Mounts)-1].Target = "/elsewhere" },
		"extra read-only bind": func(s *Spec) { s.Mounts = append(s.Mounts, Mount{Source: "/usr", Target: "/more"}) },
	}
	for name, change := range cases {
		t.Run(name, func(t *testing.T) {
			j := h.job(t, map[string]any{"py": "result = 1"})
			change(j.spec)
			_, err := h.tmpl.Start(context.Background(), j.spec)
			if !errors.Is(err, ErrForkUnfit) {
				t.Fatalf("Start = %v, want ErrForkUnfit", err)
			}
		})
	}
	if _, err := b.StartTemplate(context.Background(), &TemplateSpec{Spec: Spec{Argv: []string{"true"}}}); err == nil {
		t.Error("a template without JobArgv started")
	}
	if _, err := b.StartTemplate(context.Background(), &TemplateSpec{Spec: Spec{Argv: []string{"true"},
		Mounts: []Mount{{Source: "/tmp", Target: "/w", Writable: true}}}, JobArgv: []string{"true"}}); err == nil {
		t.Error("a template with a writable mount started")
	}
}
