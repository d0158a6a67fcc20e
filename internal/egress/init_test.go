package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// initCmd runs this test binary as the init on the host (no jail): the
// init's own logic, without a pid namespace around it.
func initCmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exec.Command(exe, append([]string{InitArg}, args...)...)
}

// proxySocket is a served proxy socket for the init to point at.
func proxySocket(t *testing.T) string {
	t.Helper()
	path := socketPath(t)
	c, err := New(Options{}).Listen(context.Background(), path, -1, -1, Policy{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
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

func TestInitExitStatus(t *testing.T) {
	sock := proxySocket(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	notSocket := filepath.Join(shortTempDir(t), "file")
	writeFile(t, notSocket, nil, 0o644)
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
		{"not found", []string{"--socket", sock, "--listen", free, "--", "no-such-command-egress"}, ExitNotFound, "no-such-command-egress"},
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

// TestInitPassesThrough: the job gets the init's environment, directory,
// stdin and stdout.
func TestInitPassesThrough(t *testing.T) {
	dir := shortTempDir(t)
	cmd := initCmd(t, "--socket", proxySocket(t), "--listen", "127.0.0.1:0", "--",
		"sh", "-c", `read line; echo "$line $EGRESS_TEST_VAR $(pwd)"`)
	cmd.Env = append(os.Environ(), "EGRESS_TEST_VAR=from-env")
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

func TestInitForwardsSignals(t *testing.T) {
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
			cmd := initCmd(t, "--socket", proxySocket(t), "--listen", "127.0.0.1:0", "--", "sh", "-c",
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

// TestInitReapsOrphans: not pid 1 here, the init is a child subreaper, so
// the job's orphans come to it and it must reap them.
func TestInitReapsOrphans(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	cmd := initCmd(t, "--socket", proxySocket(t), "--listen", "127.0.0.1:0", "--", "/usr/bin/python3", "-c", zombieScript)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "grandchild reaped\nzombies of init: 0\n") {
		t.Fatalf("%v\n%s", err, out)
	}
}

// forwarder runs the init's accept loop in-process on a loopback port.
func forwarder(t *testing.T, sock string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go acceptLoop(ln, sock, io.Discard)
	return ln.Addr().String()
}

func TestForwarder(t *testing.T) {
	srv := startServer(t, true, helloHandler("via forwarder"))
	f := startProxy(t, staticDNS(map[string][]string{targetName: {"127.0.0.1"}}), []string{"127.0.0.1/32"},
		Policy{Allow: []string{fmt.Sprintf("%s:%d", targetName, srv.port)}})
	addr := forwarder(t, f.sock)
	c := &http.Client{Transport: &http.Transport{
		Proxy:           http.ProxyURL(&url.URL{Scheme: "http", Host: addr}),
		TLSClientConfig: &tls.Config{RootCAs: getCA(t).pool},
	}}
	defer c.CloseIdleConnections()
	code, body := get(t, c, fmt.Sprintf("https://%s:%d/fwd", targetName, srv.port))
	if code != 200 || body != "via forwarder /fwd" {
		t.Fatalf("got %d %q", code, body)
	}
}

// TestForwarderHalfClose: a FIN from the job crosses the forwarder and the
// proxy, and the answer sent after it comes back.
func TestForwarderHalfClose(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		n, _ := io.Copy(io.Discard, c)
		fmt.Fprintf(c, "got %d bytes", n)
	}()
	port := netip.MustParseAddrPort(l.Addr().String()).Port()
	f := startProxy(t, staticDNS(nil), []string{"127.0.0.1/32"}, Policy{Allow: []string{fmt.Sprintf("127.0.0.1:%d", port)}})
	c, err := net.Dial("tcp", forwarder(t, f.sock))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	resp, _ := roundTrip(t, c, br, fmt.Sprintf("CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%[1]d\r\n\r\n", port))
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	if _, err := io.WriteString(c, strings.Repeat("y", 300_000)); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(br)
	if err != nil || string(got) != "got 300000 bytes" {
		t.Fatalf("answer %q, %v", got, err)
	}
}

func TestForwarderWithoutProxy(t *testing.T) {
	c, err := net.Dial("tcp", forwarder(t, filepath.Join(shortTempDir(t), "gone.sock")))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, body := roundTrip(t, c, bufio.NewReader(c), "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
	if resp.StatusCode != 502 || !strings.Contains(body, "the host's egress proxy is unreachable") {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
}

func TestEnv(t *testing.T) {
	env := Env("")
	want := map[string]string{
		"HTTPS_PROXY": "http://127.0.0.1:3128", "https_proxy": "http://127.0.0.1:3128",
		"HTTP_PROXY": "http://127.0.0.1:3128", "http_proxy": "http://127.0.0.1:3128",
		"ALL_PROXY": "http://127.0.0.1:3128", "all_proxy": "http://127.0.0.1:3128",
		"NO_PROXY": "localhost,127.0.0.1,::1", "no_proxy": "localhost,127.0.0.1,::1",
		"NODE_USE_ENV_PROXY": "1",
	}
	if len(env) != len(want) {
		t.Errorf("Env has %d entries, want %d: %q", len(env), len(want), env)
	}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if want[k] != v {
			t.Errorf("%s=%q, want %q", k, v, want[k])
		}
	}
	if got := Env("127.0.0.1:8080"); !slices.Contains(got, "HTTPS_PROXY=http://127.0.0.1:8080") {
		t.Errorf("Env(127.0.0.1:8080) = %q", got)
	}
}

func TestInitArgv(t *testing.T) {
	got := InitArgv("/host/bin/host", "/host/egress/egress.sock", "", []string{"claude", "-p", "--", "x"})
	want := []string{"/host/bin/host", InitArg, "--socket", "/host/egress/egress.sock", "--listen", DefaultListen, "--", "claude", "-p", "--", "x"}
	if !slices.Equal(got, want) {
		t.Fatalf("InitArgv = %q\nwant %q", got, want)
	}
}
