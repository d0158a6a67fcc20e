package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDirectEnvAndDir(t *testing.T) {
	t.Setenv("HOST_SECRET", "host-secret-value")
	d := NewDirect()
	dir := testDir(t, nil, true)
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		env     []string
		want    []string
		notWant []string
	}{
		{
			name:    "cleared, with defaults",
			env:     []string{"API_TOKEN=x"},
			want:    []string{"API_TOKEN=x", "HOME=" + dir, "PATH=" + os.Getenv("PATH")},
			notWant: []string{"HOST_SECRET", "host-secret-value"},
		},
		{
			name: "declared HOME and PATH win",
			env:  []string{"HOME=/nowhere", "PATH=/usr/bin:/bin"},
			want: []string{"HOME=/nowhere", "PATH=/usr/bin:/bin"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, stdout, stderr := run(t, d, &Spec{
				Argv:    bash("pwd -P; env"),
				WorkDir: dir,
				Env:     tc.env,
				// Direct ignores mounts; a bogus one must not matter.
				Mounts: []Mount{{Source: "/nonexistent", Target: "/x"}},
			})
			expectOK(t, res, stdout, stderr)
			cwd, env, _ := strings.Cut(stdout, "\n")
			if cwd != realDir {
				t.Errorf("cwd %q, want %q", cwd, realDir)
			}
			lines := strings.Split(env, "\n")
			for _, w := range tc.want {
				if !slices.Contains(lines, w) {
					t.Errorf("%q missing from the environment:\n%s", w, env)
				}
			}
			for _, nw := range tc.notWant {
				if strings.Contains(env, nw) {
					t.Errorf("%q leaked into the environment:\n%s", nw, env)
				}
			}
		})
	}
}

// TestDirectLookPath checks that Argv[0] is found on the job's PATH, not on
// the host process's.
func TestDirectLookPath(t *testing.T) {
	d := NewDirect()
	dir := testDir(t, nil, true)
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "bin", "tool"), "#!/bin/sh\necho tool ran\n", 0o755)
	writeFile(t, filepath.Join(dir, "notexec"), "#!/bin/sh\n", 0o644)

	cases := []struct {
		name    string
		argv0   string
		path    string
		wantErr bool
	}{
		{name: "relative PATH entry", argv0: "tool", path: "bin:/usr/bin:/bin"},
		{name: "absolute PATH entry", argv0: "tool", path: filepath.Join(dir, "bin")},
		{name: "relative path", argv0: "./bin/tool", path: "/usr/bin"},
		{name: "absolute path", argv0: filepath.Join(dir, "bin", "tool")},
		{name: "not on PATH", argv0: "tool", path: "/usr/bin:/bin", wantErr: true},
		{name: "not executable", argv0: "./notexec", path: "/usr/bin", wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := &Spec{Argv: []string{tc.argv0}, WorkDir: dir}
			if tc.path != "" {
				spec.Env = []string{"PATH=" + tc.path}
			}
			res, err := Run(context.Background(), d, spec)
			if tc.wantErr {
				if err == nil {
					t.Errorf("Run succeeded: %+v", res)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != 0 {
				t.Errorf("result %+v", *res)
			}
		})
	}
}

func TestDirectExitCodes(t *testing.T) {
	d := NewDirect()
	cases := []struct {
		name   string
		script string
		code   int
		signal string
	}{
		{name: "success", script: "exit 0", code: 0},
		{name: "failure", script: "exit 7", code: 7},
		{name: "killed", script: "kill -9 $$", code: -1, signal: "SIGKILL"},
		{name: "terminated", script: "kill -TERM $$", code: -1, signal: "SIGTERM"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, _, stderr := run(t, d, &Spec{Argv: bash(tc.script), WorkDir: testDir(t, nil, true)})
			if res.ExitCode != tc.code || res.Signal != tc.signal || res.TimedOut || res.Canceled {
				t.Errorf("result %+v, want code %d signal %q; stderr %s", *res, tc.code, tc.signal, stderr)
			}
		})
	}
}

func TestDirectBadSpec(t *testing.T) {
	d := NewDirect()
	for name, spec := range map[string]*Spec{
		"nil":             nil,
		"no argv":         {WorkDir: os.TempDir()},
		"missing workdir": {Argv: []string{"true"}, WorkDir: "/nonexistent/dir"},
		"bad env":         {Argv: []string{"true"}, WorkDir: os.TempDir(), Env: []string{"=x"}},
		"limits":          {Argv: []string{"true"}, WorkDir: os.TempDir(), Limits: Limits{Memory: 64 << 20}},
	} {
		t.Run(name, func(t *testing.T) {
			if res, err := Run(context.Background(), d, spec); err == nil {
				t.Errorf("Run succeeded: %+v", res)
			}
		})
	}
}

// TestDirectKillsGroup: background children in the job's process group go
// with it. (Unlike in a jail, a setsid escapee would survive.)
func TestDirectKillsGroup(t *testing.T) {
	d := NewDirect()
	cases := []struct {
		name     string
		tail     string
		timeout  time.Duration
		cancel   bool
		timedOut bool
		canceled bool
		exitCode int
	}{
		{name: "normal exit", tail: "exit 0", exitCode: 0},
		{name: "timeout", tail: "sleep 1000", timeout: 500 * time.Millisecond, timedOut: true, exitCode: -1},
		{name: "cancel", tail: "sleep 1000", cancel: true, canceled: true, exitCode: -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tok := sleepToken()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			out := &markerWriter{marker: "started", fn: func() {
				if tc.cancel {
					cancel()
				}
			}}
			res, err := Run(ctx, d, &Spec{
				Argv: bash(`sleep ` + tok + ` &
nohup sleep ` + tok + ` >/dev/null 2>&1 &
echo started
` + tc.tail),
				WorkDir: testDir(t, nil, true),
				Stdout:  out,
				Timeout: tc.timeout,
			})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), "started") {
				t.Fatalf("the script never started its background processes; result %+v", *res)
			}
			if res.TimedOut != tc.timedOut || res.Canceled != tc.canceled || res.ExitCode != tc.exitCode {
				t.Errorf("result %+v, want TimedOut=%v Canceled=%v ExitCode=%d", *res, tc.timedOut, tc.canceled, tc.exitCode)
			}
			waitGone(t, "sleep", tok)
		})
	}
}
