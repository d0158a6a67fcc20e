package jailinit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// asInit, set in the environment, makes the test binary the init: the
// init's own logic, run as a process of its own but without a jail around
// it (internal/egress tests the built binary in a jail).
const asInit = "JAILINIT_TEST_RUN_AS_INIT"

func TestMain(m *testing.M) {
	if os.Getenv(asInit) == "1" {
		os.Exit(Main(os.Args[1:], os.Stderr))
	}
	os.Exit(m.Run())
}

func initCmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), asInit+"=1")
	return cmd
}

// shortDir is a temporary directory with a path short enough for a Unix
// socket (107 bytes; t.TempDir's can be longer).
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "jinit-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// counterSocket stands in for the proxy: it reads each connection to its
// end and answers how many bytes came, so a test sees both directions and
// the half-close between them.
func counterSocket(t *testing.T) string {
	t.Helper()
	path := filepath.Join(shortDir(t), "proxy.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				n, _ := io.Copy(io.Discard, c)
				fmt.Fprintf(c, "got %d bytes", n)
			}()
		}
	}()
	return path
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	t.Fatal(err)
	return -1
}

func TestExitStatus(t *testing.T) {
	sock := counterSocket(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	notSocket := filepath.Join(shortDir(t), "file")
	if err := os.WriteFile(notSocket, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	free := "127.0.0.1:0"
	cases := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"success", []string{"--socket", sock, "--listen", free, "--", "true"}, 0, ""},
		{"exit code", []string{"--socket", sock, "--listen", free, "--", "sh", "-c", "exit 7"}, 7, ""},
		{"killed", []string{"--socket", sock, "--listen", free, "--", "sh", "-c", "kill -TERM $$"}, 128 + 15, ""},
		{"not found", []string{"--socket", sock, "--listen", free, "--", "no-such-command-jailinit"}, ExitNotFound, "no-such-command-jailinit"},
		{"not executable", []string{"--socket", sock, "--listen", free, "--", notSocket}, ExitCannotExec, "permission denied"},
		{"no command", []string{"--socket", sock, "--"}, ExitInitFailed, "usage"},
		{"no socket flag", []string{"--", "true"}, ExitInitFailed, "usage"},
		{"unknown flag", []string{"--bogus", "--", "true"}, ExitInitFailed, "bogus"},
		{"missing socket", []string{"--socket", sock + ".missing", "--", "true"}, ExitInitFailed, "no such file"},
		{"socket is a file", []string{"--socket", notSocket, "--", "true"}, ExitInitFailed, "is not a socket"},
		{"listen busy", []string{"--socket", sock, "--listen", busy.Addr().String(), "--", "true"}, ExitInitFailed, "address already in use"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			cmd := initCmd(t, tc.args...)
			cmd.Stderr = &stderr
			if code := exitCode(t, cmd.Run()); code != tc.code || !strings.Contains(stderr.String(), tc.stderr) {
				t.Fatalf("exit %d, stderr %q; want %d with %q", code, stderr.String(), tc.code, tc.stderr)
			}
		})
	}
}

// TestPassesThrough: the job gets the init's environment, directory,
// stdin and stdout.
func TestPassesThrough(t *testing.T) {
	dir := shortDir(t)
	cmd := initCmd(t, "--socket", counterSocket(t), "--listen", "127.0.0.1:0", "--",
		"sh", "-c", `read line; echo "$line $JAILINIT_TEST_VAR $(pwd)"`)
	cmd.Env = append(cmd.Env, "JAILINIT_TEST_VAR=from-env")
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader("from-stdin\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := "from-stdin from-env " + dir + "\n"; string(out) != want {
		t.Fatalf("got %q, want %q", out, want)
	}
}

func TestForwardsSignals(t *testing.T) {
	for _, tc := range []struct {
		sig  syscall.Signal
		code int
	}{
		{syscall.SIGTERM, 42}, // trapped by the job: its own exit status
		{syscall.SIGINT, 43},
		{syscall.SIGHUP, 128 + int(syscall.SIGHUP)}, // not trapped: the job dies of it
	} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			// sleep runs in the background so that the shell, waiting in
			// the wait builtin, runs its trap as soon as a signal arrives.
			cmd := initCmd(t, "--socket", counterSocket(t), "--listen", "127.0.0.1:0", "--", "sh", "-c",
				`trap 'kill $!; exit 42' TERM; trap 'kill $!; exit 43' INT; sleep 1000 & echo ready; wait`)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
				cmd.Process.Kill()
				t.Fatalf("job said %q, %v", line, err)
			}
			if err := cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			if code := exitCode(t, cmd.Wait()); code != tc.code {
				t.Fatalf("exit %d, want %d", code, tc.code)
			}
		})
	}
}

// TestReapsOrphans: not pid 1 here, the init is a child subreaper, so the
// job's orphans come to it, and it must reap them: an unreaped one stays in
// /proc as a zombie, and the job waits (for a bounded while) to see it go.
func TestReapsOrphans(t *testing.T) {
	script := `p=$(sh -c 'true >/dev/null & echo $!')
i=0
while [ -e /proc/$p ] && [ $i -lt 6000 ]; do sleep 0.01; i=$((i+1)); done
if [ -e /proc/$p ]; then echo "orphan left: $(cat /proc/$p/stat)"; else echo "orphan reaped"; fi`
	cmd := initCmd(t, "--socket", counterSocket(t), "--listen", "127.0.0.1:0", "--", "sh", "-c", script)
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != "orphan reaped\n" {
		t.Fatalf("%v\n%s", err, out)
	}
}

// forwarder runs the init's accept loop in-process on a loopback port.
func forwarder(t *testing.T, sock string) string {
	t.Helper()
	fd, err := listenTCP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Shutdown, not close, wakes the accept loop blocked on fd, and makes
	// it return.
	t.Cleanup(func() { unix.Shutdown(fd, unix.SHUT_RDWR) })
	go acceptLoop(fd, sock, io.Discard)
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	in4 := sa.(*unix.SockaddrInet4)
	return netip.AddrPortFrom(netip.AddrFrom4(in4.Addr), uint16(in4.Port)).String()
}

// TestForwarder: bytes cross to the socket, a FIN from the job crosses
// too, and the answer sent after it comes back.
func TestForwarder(t *testing.T) {
	for _, size := range []int{0, 1, 300_000} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			c, err := net.Dial("tcp", forwarder(t, counterSocket(t)))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write(bytes.Repeat([]byte("y"), size)); err != nil {
				t.Fatal(err)
			}
			if err := c.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(c)
			if want := fmt.Sprintf("got %d bytes", size); err != nil || string(got) != want {
				t.Fatalf("answer %q, %v; want %q", got, err, want)
			}
		})
	}
}

func TestForwarderWithoutProxy(t *testing.T) {
	c, err := net.Dial("tcp", forwarder(t, filepath.Join(shortDir(t), "gone.sock")))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := io.ReadAll(c)
	if err != nil || !strings.HasPrefix(string(got), "HTTP/1.1 502 Bad Gateway\r\n") || !strings.Contains(string(got), "the host's egress proxy is unreachable") {
		t.Fatalf("got %q, %v", got, err)
	}
}

func TestArgv(t *testing.T) {
	cases := []struct {
		listen string
		want   []string
	}{
		{"", []string{"/host/bin/jailinit", "--socket", "/host/egress/egress.sock", "--listen", DefaultListen, "--", "claude", "-p", "--", "x"}},
		{"127.0.0.1:8080", []string{"/host/bin/jailinit", "--socket", "/host/egress/egress.sock", "--listen", "127.0.0.1:8080", "--", "claude", "-p", "--", "x"}},
	}
	for _, tc := range cases {
		if got := Argv("/host/bin/jailinit", "/host/egress/egress.sock", tc.listen, []string{"claude", "-p", "--", "x"}); !slices.Equal(got, tc.want) {
			t.Errorf("Argv(listen %q) = %q\nwant %q", tc.listen, got, tc.want)
		}
	}
}
