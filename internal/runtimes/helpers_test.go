package runtimes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/host/internal/jailfs"
	"github.com/agenthost/host/internal/jobtype"
)

// testShimDir holds the shims for every test run in this package.
var testShimDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "runtimes-shims-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testShimDir = filepath.Join(dir, "shims")
	if err := WriteShims(testShimDir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// scriptCase is one end-to-end run of a script through Detect, Build, a real
// interpreter and Outcome.
type scriptCase struct {
	name    string
	file    string            // entry file name, e.g. "job.py"
	src     string            // its content
	exec    bool              // give the entry file the execute bit
	files   map[string]string // more files beside it (modules it imports)
	payload string            // JSON object; "" means "{}"

	want       string // expected result JSON, compared semantically
	wantErr    string // "argument", "definition", "script" or "result"
	errHas     string // substring of the error message
	exitCode   int    // expected ScriptError.ExitCode when non-zero
	stdoutHas  []string
	stdoutNot  []string
	stderrHas  []string
	lastLineIs string // expected last stdout line, when set
}

type runResult struct {
	result   json.RawMessage
	err      error
	stdout   string
	stderr   string
	lastLine string
	exitCode int
	kind     Kind
	cmd      *Command
}

// runScript runs c with the given PATH (empty: the test process's own).
func runScript(t *testing.T, c scriptCase, path string) runResult {
	t.Helper()
	return runScriptAs(t, c, path, "")
}

// runScriptAs runs c cold (warm "") or, with "--warm" or "--warm-late", as a warm jail's
// runtime started by BuildWarm and handed the job over on stdin.
func runScriptAs(t *testing.T, c scriptCase, path, warm string) runResult {
	t.Helper()
	root := t.TempDir()
	src := filepath.Join(root, "src")
	ioDir := filepath.Join(root, "io")
	work := filepath.Join(root, "job")
	for _, d := range []string{src, ioDir, work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mode := os.FileMode(0o644)
	if c.exec {
		mode = 0o755
	}
	script := filepath.Join(src, c.file)
	if err := os.WriteFile(script, []byte(c.src), mode); err != nil {
		t.Fatal(err)
	}
	for name, content := range c.files {
		if err := os.WriteFile(filepath.Join(src, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	payload := []byte(c.payload)
	if len(payload) == 0 {
		payload = []byte("{}")
	}
	var args map[string]any
	if err := json.Unmarshal(payload, &args); err != nil {
		t.Fatalf("bad test payload: %v", err)
	}
	if err := os.WriteFile(filepath.Join(ioDir, ArgsFile), payload, 0o644); err != nil {
		t.Fatal(err)
	}

	kind, err := Detect(script)
	if err != nil {
		t.Fatalf("Detect: %v", err)
	}
	cmd, err := Build(kind, Paths{Script: script, ShimDir: testShimDir, IODir: ioDir}, payload, args)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}

	stdin := cmd.Stdin
	argv, runtimeEnv := cmd.Argv, cmd.Env
	if warm != "" {
		wcmd, err := BuildWarm(kind, Paths{Script: script, ShimDir: testShimDir, IODir: ioDir}, warm == "--warm")
		if err != nil {
			t.Fatalf("BuildWarm: %v", err)
		}
		// The job's part of the environment comes with the hand-over, as in a warm jail.
		var jobEnv []string
		if kind == Bash {
			jobEnv = cmd.Env
		}
		if stdin, err = Handover(kind, payload, jobEnv); err != nil {
			t.Fatalf("Handover: %v", err)
		}
		argv, runtimeEnv = wcmd.Argv, wcmd.Env
		os.Remove(filepath.Join(ioDir, ArgsFile)) // the hand-over is the only way in
	}
	if path == "" {
		path = os.Getenv("PATH")
	}
	env := append(withoutEnv(os.Environ(), "PATH"), "PATH="+path)
	env = append(env, runtimeEnv...)
	argv0, err := lookPathIn(argv[0], path)
	if err != nil {
		t.Skipf("%s not available: %v", argv[0], err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	proc := exec.CommandContext(ctx, argv0, argv[1:]...)
	proc.Args[0] = argv[0]
	proc.Dir = work
	proc.Env = env
	if stdin != nil {
		proc.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	proc.Stdout, proc.Stderr = &stdout, &stderr
	runErr := proc.Run()
	var exitErr *exec.ExitError
	if runErr != nil && !errors.As(runErr, &exitErr) {
		t.Fatalf("run %v: %v", cmd.Argv, runErr)
	}
	if ctx.Err() != nil {
		t.Fatalf("run %v: timed out; stderr:\n%s", cmd.Argv, stderr.String())
	}
	code := proc.ProcessState.ExitCode()

	// A warm runtime says it is ready, once, before it reads its hand-over; the runner drops
	// that line from the job's output, and so does this.
	if warm != "" {
		ready := ReadyMarker + "\n"
		// (A script whose top-level code never finishes is never ready.)
		if n := strings.Count(stdout.String(), ready); n > 1 || n == 0 && code == 0 {
			t.Errorf("warm runtime printed the ready line %d times and exited %d; want it once", n, code)
		}
		rest := strings.Replace(stdout.String(), ready, "", 1)
		stdout.Reset()
		stdout.WriteString(rest)
	}
	// The end line, where the runtime prints one, comes last on both streams, and announces the
	// code the runtime then exits with: the host answers on it without waiting for the exit.
	out, outEnd, outFound := cutEnd(stdout.String())
	errOut, errEnd, errFound := cutEnd(stderr.String())
	if outFound != errFound || (outFound && (outEnd != code || errEnd != code)) {
		t.Errorf("end lines: stdout %v (code %d), stderr %v (code %d); the runtime exited %d", outFound, outEnd, errFound, errEnd, code)
	}
	stdout.Reset()
	stdout.WriteString(out)
	stderr.Reset()
	stderr.WriteString(errOut)

	last := lastNonEmptyLine(stdout.String())
	result, err := Outcome(kind, openIO(t, ioDir), 1<<20, []byte(last), code)
	return runResult{
		result: result, err: err,
		stdout: stdout.String(), stderr: stderr.String(), lastLine: last,
		exitCode: code, kind: kind, cmd: cmd,
	}
}

// check compares a run with what c expects.
func check(t *testing.T, c scriptCase, r runResult) {
	t.Helper()
	defer func() {
		if t.Failed() {
			t.Logf("exit %d\nstdout:\n%s\nstderr:\n%s", r.exitCode, r.stdout, r.stderr)
		}
	}()
	if c.wantErr == "" {
		if r.err != nil {
			t.Fatalf("Outcome error (%T): %v", r.err, r.err)
		}
		assertJSONEqual(t, r.result, c.want)
	} else {
		if r.err == nil {
			t.Fatalf("Outcome = %s, want a %s error", r.result, c.wantErr)
		}
		if got := errKind(r.err); got != c.wantErr {
			t.Fatalf("error %T %q, want a %s error", r.err, r.err, c.wantErr)
		}
		if !strings.Contains(r.err.Error(), c.errHas) {
			t.Errorf("error %q does not contain %q", r.err, c.errHas)
		}
		if jobtype.IsTerminal(r.err) != (c.wantErr != "script") {
			t.Errorf("jobtype.IsTerminal(%T) = %v", r.err, jobtype.IsTerminal(r.err))
		}
		var se *ScriptError
		if c.exitCode != 0 && errors.As(r.err, &se) && se.ExitCode != c.exitCode {
			t.Errorf("ScriptError.ExitCode = %d, want %d", se.ExitCode, c.exitCode)
		}
	}
	for _, s := range c.stdoutHas {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("stdout does not contain %q", s)
		}
	}
	for _, s := range c.stdoutNot {
		if strings.Contains(r.stdout, s) {
			t.Errorf("stdout contains %q", s)
		}
	}
	for _, s := range c.stderrHas {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("stderr does not contain %q", s)
		}
	}
	if c.lastLineIs != "" && r.lastLine != c.lastLineIs {
		t.Errorf("last stdout line = %q, want %q", r.lastLine, c.lastLineIs)
	}
}

func errKind(err error) string {
	var (
		a *ArgumentError
		d *DefinitionError
		s *ScriptError
		r *ResultError
	)
	switch {
	case errors.As(err, &a):
		return "argument"
	case errors.As(err, &d):
		return "definition"
	case errors.As(err, &s):
		return "script"
	case errors.As(err, &r):
		return "result"
	}
	return fmt.Sprintf("untyped %T", err)
}

func assertJSONEqual(t *testing.T, got json.RawMessage, want string) {
	t.Helper()
	if !json.Valid(got) {
		t.Fatalf("result %q is not valid JSON", got)
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want %q: %v", want, err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if !bytes.Equal(gb, wb) {
		t.Fatalf("result = %s, want %s", got, want)
	}
}

// cutEnd removes the end line (EndMarker) that closes out, and says the code it announced.
func cutEnd(out string) (string, int, bool) {
	body := strings.TrimSuffix(out, "\n")
	i := strings.LastIndexByte(body, '\n') + 1
	before, code, ok := ParseEnd([]byte(body[i:]))
	if !ok {
		return out, 0, false
	}
	return body[:i] + string(before), code, true
}

// lastNonEmptyLine is what the runner tracks while streaming stdout.
func lastNonEmptyLine(s string) string {
	lines := strings.Split(s, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.TrimSpace(lines[i]) != "" {
			return lines[i]
		}
	}
	return ""
}

func withoutEnv(env []string, key string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// lookPathIn resolves name on the given PATH, as the job's process would;
// exec.LookPath only knows the test process's own PATH.
func lookPathIn(name, path string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if info, err := os.Stat(p); err == nil && info.Mode().IsRegular() && info.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found on PATH %s", name, path)
}

// runPlain runs cmd in dir with the test's environment and returns its exit
// code, for tests that arrange the IO dir themselves.
func runPlain(t *testing.T, cmd *Command, dir string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	proc := exec.CommandContext(ctx, cmd.Argv[0], cmd.Argv[1:]...)
	proc.Dir = dir
	proc.Env = append(os.Environ(), cmd.Env...)
	if cmd.Stdin != nil {
		proc.Stdin = bytes.NewReader(cmd.Stdin)
	}
	out, err := proc.CombinedOutput()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Skipf("cannot run %v: %v", cmd.Argv, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("%v timed out:\n%s", cmd.Argv, out)
	}
	t.Logf("%v:\n%s", cmd.Argv, out)
	return proc.ProcessState.ExitCode()
}

// runOutput runs cmd and returns its stdout, failing the test on any error.
func runOutput(t *testing.T, cmd *Command) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	proc := exec.CommandContext(ctx, cmd.Argv[0], cmd.Argv[1:]...)
	proc.Env = append(os.Environ(), cmd.Env...)
	var stderr bytes.Buffer
	proc.Stderr = &stderr
	out, err := proc.Output()
	if err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Argv[0], err, stderr.String())
	}
	return out
}

// benchRun runs cmd (with its Env taken as the whole environment) and
// returns its exit code.
func benchRun(b *testing.B, cmd *Command, dir string) int {
	proc := exec.Command(cmd.Argv[0], cmd.Argv[1:]...)
	proc.Dir = dir
	proc.Env = cmd.Env
	if cmd.Stdin != nil {
		proc.Stdin = bytes.NewReader(cmd.Stdin)
	}
	err := proc.Run()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		b.Fatal(err)
	}
	return proc.ProcessState.ExitCode()
}

// openIO opens a test's io directory as the host does: through jailfs.
func openIO(t testing.TB, dir string) IODir {
	t.Helper()
	d, err := jailfs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}
