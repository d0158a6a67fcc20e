package runtimes

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/host/internal/jobtype"
)

func TestDetect(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		must(t, os.WriteFile(p, []byte(content), mode))
		must(t, os.Chmod(p, mode))
		return p
	}
	must(t, os.Mkdir(filepath.Join(dir, "pkg.py"), 0o755))

	tests := []struct {
		path    string
		want    Kind
		wantErr string
	}{
		{path: write("job.py", "def main(): pass\n", 0o644), want: Python},
		{path: write("JOB.PY", "def main(): pass\n", 0o644), want: Python},
		{path: write("job.ts", "export function main() {}\n", 0o644), want: Bun},
		{path: write("job.tsx", "export function main() {}\n", 0o644), want: Bun},
		{path: write("job.js", "export function main() {}\n", 0o644), want: Bun},
		{path: write("job.mjs", "export function main() {}\n", 0o644), want: Bun},
		{path: write("job.cjs", "exports.main = () => 1\n", 0o644), want: Bun},
		{path: write("job.sh", "echo hi\n", 0o644), want: Bash},
		// A known extension wins over a shebang.
		{path: write("tool.py", "#!/usr/bin/env python3\n", 0o755), want: Python},
		{path: write("tool", "#!/usr/bin/env ruby\nputs 1\n", 0o755), want: Exec},
		{path: write("tool.rb", "#!/usr/bin/env ruby\nputs 1\n", 0o700), want: Exec},
		{path: write("noexec.rb", "#!/usr/bin/env ruby\nputs 1\n", 0o644), wantErr: `starts with "#!" but is not executable`},
		{path: write("notes.txt", "hello\n", 0o755), wantErr: `unsupported file (extension ".txt", no "#!" line)`},
		{path: write("Makefile", "all:\n", 0o644), wantErr: `unsupported file (no extension, no "#!" line)`},
		{path: write("empty", "", 0o755), wantErr: "unsupported file"},
		{path: filepath.Join(dir, "missing.py"), wantErr: "no such file"},
		{path: filepath.Join(dir, "pkg.py"), wantErr: "not a regular file"},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.path), func(t *testing.T) {
			got, err := Detect(tt.path)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("Detect = %q, want an error", got)
				}
				msg := err.Error()
				if !strings.Contains(msg, tt.wantErr) || !strings.Contains(msg, tt.path) {
					t.Errorf("err = %q, want it to name the file and contain %q", msg, tt.wantErr)
				}
				if strings.Contains(tt.wantErr, "unsupported") && !strings.Contains(msg, ".py (python3)") {
					t.Errorf("err = %q does not list what is supported", msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("Detect = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestOutcomeFromFiles(t *testing.T) {
	tests := []struct {
		name     string
		result   string // content of result.json, "" for none
		errJSON  string // content of error.json, "" for none
		exitCode int
		want     string
		wantErr  string // errKind
		errIs    string
		wantCode int
	}{
		{name: "result", result: `{"a": [1, 2]}` + "\n", want: `{"a": [1, 2]}`},
		{name: "null result", result: `null`, want: `null`},
		{name: "argument", errJSON: `{"kind":"argument","message":"missing required argument \"x\" for main(x)"}`, exitCode: 2,
			wantErr: "argument", errIs: `missing required argument "x" for main(x)`},
		{name: "definition", errJSON: `{"kind":"definition","message":"no main"}`, exitCode: 2, wantErr: "definition", errIs: "no main"},
		{name: "result error", errJSON: `{"kind":"result","message":"not JSON-serialisable"}`, exitCode: 2, wantErr: "result", errIs: "not JSON-serialisable"},
		{name: "exception", errJSON: `{"kind":"exception","message":"ValueError: boom"}`, exitCode: 1,
			wantErr: "script", errIs: "ValueError: boom", wantCode: 1},
		{name: "error.json wins over result.json", result: `1`, errJSON: `{"kind":"exception","message":"late"}`, exitCode: 1,
			wantErr: "script", errIs: "late", wantCode: 1},
		{name: "unreadable error.json", errJSON: `{oops`, exitCode: 1, wantErr: "script", errIs: "unreadable error.json", wantCode: 1},
		{name: "killed", exitCode: -1, wantErr: "script", errIs: "killed by a signal without a result", wantCode: -1},
		{name: "OOM", exitCode: 137, wantErr: "script", errIs: "code 137 (usually: killed by signal 9) without a result", wantCode: 137},
		{name: "interpreter missing", exitCode: 127, wantErr: "script", errIs: "command not found", wantCode: 127},
		{name: "non-zero despite result", result: `1`, exitCode: 3, wantErr: "script", errIs: "code 3", wantCode: 3},
		{name: "nothing written", exitCode: 0, wantErr: "script", errIs: "wrote no result"},
		{name: "invalid result", result: `{"a":`, wantErr: "result", errIs: "valid JSON"},
	}
	for _, tt := range tests {
		for _, kind := range []Kind{Python, Bun} {
			t.Run(fmt.Sprintf("%s/%s", kind, tt.name), func(t *testing.T) {
				dir := t.TempDir()
				if tt.result != "" {
					must(t, os.WriteFile(filepath.Join(dir, ResultFile), []byte(tt.result), 0o644))
				}
				if tt.errJSON != "" {
					must(t, os.WriteFile(filepath.Join(dir, ErrorFile), []byte(tt.errJSON), 0o644))
				}
				got, err := Outcome(kind, openIO(t, dir), 1<<20, []byte("ignored for shims"), tt.exitCode)
				checkOutcome(t, got, err, tt.want, tt.wantErr, tt.errIs, tt.wantCode)
			})
		}
	}
}

func TestOutcomeFromLastLine(t *testing.T) {
	tests := []struct {
		name     string
		line     string
		exitCode int
		want     string
		wantErr  string
		errIs    string
		wantCode int
	}{
		{name: "object", line: `  {"ok": true,  "n": [1, 2]}  `, want: `{"ok":true,"n":[1,2]}`},
		{name: "number", line: `42`, want: `42`},
		{name: "string literal", line: `"quoted"`, want: `"quoted"`},
		{name: "bool", line: `false`, want: `false`},
		{name: "text", line: `copied 3 files`, want: `"copied 3 files"`},
		{name: "text with html chars", line: `a <b> & c`, want: `"a <b> & c"`},
		{name: "text with CR", line: "done\r", want: `"done"`},
		{name: "JSON with CRLF", line: "[1]\r\n", want: `[1]`},
		{name: "unicode", line: `Grüße 東京`, want: `"Grüße 東京"`},
		{name: "almost JSON", line: `{"a": 1`, want: `"{\"a\": 1"`},
		{name: "empty", line: ``, want: `null`},
		{name: "blank", line: " \r", want: `null`},
		{name: "exit code", line: `{"ok": true}`, exitCode: 2, wantErr: "script", errIs: "exited with code 2", wantCode: 2},
		{name: "signal", exitCode: -1, wantErr: "script", errIs: "killed by a signal", wantCode: -1},
	}
	for _, tt := range tests {
		for _, kind := range []Kind{Bash, Exec} {
			t.Run(fmt.Sprintf("%s/%s", kind, tt.name), func(t *testing.T) {
				got, err := Outcome(kind, nil, 1<<20, []byte(tt.line), tt.exitCode)
				checkOutcome(t, got, err, tt.want, tt.wantErr, tt.errIs, tt.wantCode)
				if err == nil && !bytes.Equal(got, []byte(tt.want)) {
					t.Errorf("Outcome = %s, want exactly %s", got, tt.want)
				}
			})
		}
	}
}

func checkOutcome(t *testing.T, got []byte, err error, want, wantErr, errIs string, wantCode int) {
	t.Helper()
	if wantErr == "" {
		if err != nil {
			t.Fatalf("err = %v", err)
		}
		assertJSONEqual(t, got, want)
		return
	}
	if err == nil {
		t.Fatalf("Outcome = %s, want a %s error", got, wantErr)
	}
	if k := errKind(err); k != wantErr {
		t.Fatalf("err = %T %v, want a %s error", err, err, wantErr)
	}
	if !strings.Contains(err.Error(), errIs) {
		t.Errorf("err = %q, want it to contain %q", err, errIs)
	}
	var se *ScriptError
	if errors.As(err, &se) && wantCode != 0 && se.ExitCode != wantCode {
		t.Errorf("ExitCode = %d, want %d", se.ExitCode, wantCode)
	}
}

func TestOutcomeUnknownKind(t *testing.T) {
	if _, err := Outcome("ruby", openIO(t, t.TempDir()), 1<<20, nil, 0); err == nil || errKind(err) != "untyped *errors.errorString" {
		t.Fatalf("err = %T %v", err, err)
	}
}

func TestIsTerminal(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{&ArgumentError{Message: "x"}, true},
		{&DefinitionError{Message: "x"}, true},
		{&ResultError{Message: "x"}, true},
		{fmt.Errorf("job 7: %w", &ArgumentError{Message: "x"}), true},
		{&ScriptError{ExitCode: 1, Message: "x"}, false},
		{fmt.Errorf("job 7: %w", &ScriptError{ExitCode: 1}), false},
		{errors.New("io failure"), false},
		{nil, false},
	}
	for _, tt := range tests {
		if got := jobtype.IsTerminal(tt.err); got != tt.want {
			t.Errorf("jobtype.IsTerminal(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestWriteShims(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "shims")
	must(t, WriteShims(dir))
	// A second write replaces the files in place, e.g. after an upgrade.
	must(t, os.WriteFile(filepath.Join(dir, pythonShim), []byte("stale"), 0o600))
	must(t, WriteShims(dir))

	info, err := os.Stat(dir)
	must(t, err)
	if info.Mode().Perm() != 0o755 {
		t.Errorf("dir mode = %v, want 0755", info.Mode().Perm())
	}
	entries, err := os.ReadDir(dir)
	must(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "_agenthost_reuse.py,_agenthost_shim.py,bash.sh,forkserver.py,reuse.mjs,reuse.sh,shim.mjs,shim.py,warm.sh" {
		t.Errorf("files = %v, want only the two shims (Python's in two files), Python's fork server, bash's runner and warm prelude, and the three reuse loops", names)
	}
	for _, name := range shimFiles {
		p := filepath.Join(dir, name)
		info, err := os.Stat(p)
		must(t, err)
		if info.Mode().Perm() != 0o644 {
			t.Errorf("%s mode = %v, want 0644", name, info.Mode().Perm())
		}
		got, err := os.ReadFile(p)
		must(t, err)
		want, err := shims.ReadFile(name)
		must(t, err)
		if !bytes.Equal(got, want) {
			t.Errorf("%s content differs from the embedded shim", name)
		}
	}
}

// TestOutcomeRefusesHostileIOFiles is the red team's attack on the io directory: a job that
// links result.json (or error.json) to a host file would have it published as its result; a
// fifo there would block a host thread in open(); /dev/zero would fill the host's memory.
func TestOutcomeRefusesHostileIOFiles(t *testing.T) {
	host := filepath.Join(t.TempDir(), "nats-auth.json")
	must(t, os.WriteFile(host, []byte(`{"password":"hosts-secret"}`), 0o600))
	plant := map[string]func(p string) error{
		"link to a host file": func(p string) error { return os.Symlink(host, p) },
		"fifo":                func(p string) error { return syscall.Mkfifo(p, 0o644) },
		"link to /dev/zero":   func(p string) error { return os.Symlink("/dev/zero", p) },
		"directory":           func(p string) error { return os.Mkdir(p, 0o755) },
		"oversized":           func(p string) error { return os.WriteFile(p, bytes.Repeat([]byte("1"), 2048), 0o644) },
	}
	for _, file := range []string{ResultFile, ErrorFile} {
		for what, do := range plant {
			t.Run(file+"/"+what, func(t *testing.T) {
				dir := t.TempDir()
				must(t, do(filepath.Join(dir, file)))
				done := make(chan error, 1)
				go func() {
					_, err := Outcome(Python, openIO(t, dir), 1024, nil, 0)
					done <- err
				}()
				var err error
				select {
				case err = <-done:
				case <-time.After(10 * time.Second):
					t.Fatal("Outcome blocked on the io file")
				}
				if what == "oversized" && file == ErrorFile {
					// error.json's own bound is larger than this result limit: read as usual.
					if err == nil || strings.Contains(err.Error(), "refused") {
						t.Fatalf("Outcome = %v", err)
					}
					return
				}
				if !jobtype.IsTerminal(err) || !strings.Contains(err.Error(), file) {
					t.Fatalf("Outcome = %v (%s), want a terminal error naming %s", err, errKind(err), file)
				}
				if strings.Contains(err.Error(), "hosts-secret") || strings.Contains(err.Error(), filepath.Dir(host)) {
					t.Fatalf("the error carries the host file: %v", err)
				}
			})
		}
	}
}
