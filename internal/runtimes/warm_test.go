package runtimes

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestWarmRunsEveryCase runs every Python, Bun and bash case through a warm runtime: what a
// cold start does, a warm one handed the same job must do too.
func TestWarmRunsEveryCase(t *testing.T) {
	var all []scriptCase
	all = append(all, pythonCases...)
	all = append(all, bunCases...)
	for _, c := range bashCases {
		if strings.HasSuffix(c.file, ".sh") {
			all = append(all, c)
		}
	}
	for _, mode := range []string{"--warm", "--warm-late"} {
		t.Run(mode, func(t *testing.T) {
			for _, c := range all {
				t.Run(c.file+"/"+c.name, func(t *testing.T) {
					r := runScriptAs(t, c, "", mode)
					if r.exitCode == ExitImportAhead && mode == "--warm" {
						// What the host does: no job reached that jail; the next imports late.
						r = runScriptAs(t, c, "", "--warm-late")
					}
					check(t, c, r)
				})
			}
		})
	}
}

// warmProc is a runtime started by BuildWarm, stdin held open until the test hands over.
type warmProc struct {
	proc   *exec.Cmd
	stdin  *os.File
	stdout *bufio.Reader
	stderr bytes.Buffer
	ioDir  string
	dir    string
}

func startWarm(t *testing.T, kind Kind, file, src string, importAhead bool) *warmProc {
	t.Helper()
	root := t.TempDir()
	w := &warmProc{ioDir: filepath.Join(root, "io"), dir: root}
	if err := os.Mkdir(w.ioDir, 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, file)
	if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd, err := BuildWarm(kind, Paths{Script: script, ShimDir: testShimDir, IODir: w.ioDir}, importAhead)
	if err != nil {
		t.Fatal(err)
	}
	argv0, err := exec.LookPath(cmd.Argv[0])
	if err != nil {
		t.Skipf("%s not available: %v", cmd.Argv[0], err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	w.proc = exec.CommandContext(ctx, argv0, cmd.Argv[1:]...)
	w.proc.Dir = root
	w.proc.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + root}, cmd.Env...)
	r, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := w.proc.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	w.proc.Stdin, w.stdin, w.stdout = r, wr, bufio.NewReader(out)
	w.proc.Stderr = &w.stderr
	if err := w.proc.Start(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	t.Cleanup(func() { w.stdin.Close(); _ = w.proc.Wait() })
	return w
}

// line reads the next stdout line: it blocks until the runtime printed it.
func (w *warmProc) line(t *testing.T) string {
	t.Helper()
	l, err := w.stdout.ReadString('\n')
	if err != nil {
		t.Fatalf("read stdout: %v (stderr: %s)", err, w.stderr.String())
	}
	return strings.TrimSpace(l)
}

// TestWarmWaitsForHandover: top-level code runs ahead (or, late, not), the job's environment
// exists only once handed over, and a runtime whose stdin closes without a hand-over runs no
// job at all.
func TestWarmWaitsForHandover(t *testing.T) {
	cases := []struct {
		name, file, src string
		kind            Kind
		ahead           bool
	}{
		{"python", "job.py", "import os\nprint('top', os.environ.get('SECRET', 'none'), flush=True)\n" +
			"def main(x):\n    return {'x': x, 'secret': os.environ['SECRET'], 'job': os.environ['JOB_ID']}\n", Python, true},
		{"python late", "job.py", "import os\nprint('top', os.environ.get('SECRET', 'none'), flush=True)\n" +
			"def main(x):\n    return {'x': x, 'secret': os.environ['SECRET'], 'job': os.environ['JOB_ID']}\n", Python, false},
		{"bun", "job.ts", "console.log('top', process.env.SECRET ?? 'none');\n" +
			"export function main(x: number) { return { x, secret: process.env.SECRET, job: process.env.JOB_ID }; }\n", Bun, true},
		{"bun late", "job.ts", "console.log('top', process.env.SECRET ?? 'none');\n" +
			"export function main(x: number) { return { x, secret: process.env.SECRET, job: process.env.JOB_ID }; }\n", Bun, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := startWarm(t, c.kind, c.file, c.src, c.ahead)
			if c.ahead {
				// The top-level code ran before any job, and saw no secret.
				if got := w.line(t); got != "top none" {
					t.Fatalf("top-level output before the hand-over = %q, want %q", got, "top none")
				}
			}
			// Ready, after the top-level code when it ran ahead, and before any hand-over.
			if got := w.line(t); got != ReadyMarker {
				t.Fatalf("line before the hand-over = %q, want the ready line", got)
			}
			h, err := Handover(c.kind, []byte(`{"x": 7}`), []string{"SECRET=s3cr3t", "JOB_ID=j1"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.stdin.Write(h); err != nil {
				t.Fatal(err)
			}
			w.stdin.Close()
			if !c.ahead {
				// Late: the top-level code runs with the job's environment.
				if got := w.line(t); got != "top s3cr3t" {
					t.Fatalf("top-level output after the hand-over = %q, want %q", got, "top s3cr3t")
				}
			}
			if err := w.proc.Wait(); err != nil {
				t.Fatalf("runtime: %v\n%s", err, w.stderr.String())
			}
			res, err := Outcome(c.kind, openIO(t, w.ioDir), 1<<20, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			assertJSONEqual(t, res, `{"x": 7, "secret": "s3cr3t", "job": "j1"}`)
		})
	}
}

func TestWarmTornDownWithoutHandover(t *testing.T) {
	cases := []struct {
		name, file, src string
		kind            Kind
	}{
		{"python", "job.py", "import os\ndef main():\n    open(os.path.join(os.environ['HOME'], 'ran'), 'w')\n", Python},
		{"bun", "job.ts", "import { writeFileSync } from 'node:fs';\nexport function main() { writeFileSync(process.env.HOME + '/ran', ''); }\n", Bun},
		{"bash", "job.sh", "touch \"$HOME/ran\"\n", Bash},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := startWarm(t, c.kind, c.file, c.src, true)
			w.stdin.Close()
			if err := w.proc.Wait(); err != nil {
				t.Fatalf("a runtime torn down before its job should exit quietly: %v\n%s", err, w.stderr.String())
			}
			for _, f := range []string{filepath.Join(w.dir, "ran"), filepath.Join(w.ioDir, ResultFile), filepath.Join(w.ioDir, ErrorFile)} {
				if _, err := os.Stat(f); err == nil {
					t.Errorf("%s exists: a job ran without a hand-over", f)
				}
			}
		})
	}
}

// TestWarmImportAheadFails: a script whose top-level code fails ahead of any job ends its
// runtime with ExitImportAhead at once, without waiting for a hand-over.
func TestWarmImportAheadFails(t *testing.T) {
	for _, c := range []struct {
		name, file, src string
		kind            Kind
	}{
		{"python", "job.py", "import os\nKEY = os.environ['KEY']\ndef main():\n    return KEY\n", Python},
		{"bun", "job.ts", "const key = process.env.KEY!.trim();\nexport function main() { return key; }\n", Bun},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := startWarm(t, c.kind, c.file, c.src, true)
			err := w.proc.Wait() // stdin is still open: only the failed import ends it
			if code := w.proc.ProcessState.ExitCode(); code != ExitImportAhead {
				t.Fatalf("exit %d (%v), want %d\n%s", code, err, ExitImportAhead, w.stderr.String())
			}
		})
	}
}

func TestHandover(t *testing.T) {
	cases := []struct {
		name    string
		kind    Kind
		payload string
		env     []string
		want    string
		wantErr string
	}{
		{name: "python", kind: Python, payload: `{"a":1}`, env: []string{"A=1", "A=2"}, want: `{"args":{"a":1},"env":{"A":"2"}}`},
		{name: "empty payload", kind: Bun, payload: " ", want: `{"args":{},"env":{}}`},
		{name: "bash quotes every odd byte", kind: Bash, payload: `{}`, env: []string{"V=a'b\n$(x)`\\"},
			want: "export V=$'a\\x27b\\x0a\\x24\\x28x\\x29\\x60\\x5c'\n\n{}"},
		{name: "bad name", kind: Bash, env: []string{"A-B=1"}, wantErr: "bad environment entry"},
		{name: "NUL", kind: Python, env: []string{"A=\x00"}, wantErr: "bad environment entry"},
		{name: "exec", kind: Exec, wantErr: "cannot wait"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Handover(c.kind, []byte(c.payload), c.env)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil || string(got) != c.want {
				t.Fatalf("Handover = %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

// TestHandoverBashValues: what bash reads back is the value sent, byte for byte.
func TestHandoverBashValues(t *testing.T) {
	values := []string{"plain", "", "a'b\"c", "line\nbreak", "$(touch /tmp/x) `id` ${HOME}", "tab\there", "ünï", "\\x41", "\x01\x7f\xff"}
	w := startWarm(t, Bash, "job.sh", "for v in V0 V1 V2 V3 V4 V5 V6 V7 V8; do printf '%s\\0' \"${!v}\"; done\n", true)
	var env []string
	for i, v := range values {
		env = append(env, "V"+string(rune('0'+i))+"="+v)
	}
	h, err := Handover(Bash, nil, env)
	if err != nil {
		t.Fatal(err)
	}
	w.stdin.Write(h)
	w.stdin.Close()
	var out bytes.Buffer
	if _, err := out.ReadFrom(w.stdout); err != nil {
		t.Fatal(err)
	}
	printed, code, ended := cutEnd(strings.TrimPrefix(out.String(), ReadyMarker+"\n"))
	if !ended || code != 0 {
		t.Errorf("end line: %v, code %d; want one, with 0", ended, code)
	}
	got := strings.Split(strings.TrimSuffix(printed, "\x00"), "\x00")
	if len(got) != len(values) {
		t.Fatalf("got %q, want %q\n%s", got, values, w.stderr.String())
	}
	for i := range values {
		if got[i] != values[i] {
			t.Errorf("V%d = %q, want %q", i, got[i], values[i])
		}
	}
}

// TestBuildTemplate: only Python can be forked from a template, and its template runs the shim
// in template mode with a job's interpreter flags.
func TestBuildTemplate(t *testing.T) {
	p := Paths{Script: "/fn/f.py", ShimDir: "/shim", IODir: "/io"}
	for _, kind := range []Kind{Bun, Bash, Exec} {
		if CanFork(kind) {
			t.Errorf("CanFork(%s) = true", kind)
		}
		if _, err := BuildTemplate(kind, p); err == nil || !strings.Contains(err.Error(), "cannot be forked") {
			t.Errorf("BuildTemplate(%s) = %v, want a refusal", kind, err)
		}
	}
	cmd, err := BuildTemplate(Python, p)
	if err != nil {
		t.Fatal(err)
	}
	job, _ := Build(Python, p, nil, nil)
	if want := append(slices.Clone(job.Argv), "--template"); !slices.Equal(cmd.Argv, want) {
		t.Errorf("argv %q, want %q", cmd.Argv, want)
	}
	if _, err := BuildTemplate(Python, Paths{Script: "/fn/f.py"}); err == nil {
		t.Error("a template without ShimDir and IODir was built")
	}
}
