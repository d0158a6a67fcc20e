package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/testkit/testwait"
)

// syncBuffer is a log buffer the server process writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// exposureEnv is a private data dir, functions dir and NATS CLI config for one serve.
type exposureEnv struct {
	dir, data, fns, key string
	env                 []string
}

func newExposureEnv(t *testing.T, files map[string]string) *exposureEnv {
	t.Helper()
	dir, err := os.MkdirTemp("", "host-exposure-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	e := &exposureEnv{dir: dir, data: filepath.Join(dir, "data"), fns: filepath.Join(dir, "functions"), key: filepath.Join(dir, "secrets.key")}
	os.MkdirAll(e.fns, 0o755)
	for name, src := range files {
		os.WriteFile(filepath.Join(e.fns, name), []byte(src), 0o644)
	}
	// The NATS CLI contexts serve --nats-auth writes go here, never to the tester's home.
	e.env = append(os.Environ(), "XDG_CONFIG_HOME="+filepath.Join(dir, "config"), "NATS_URL=", "NATS_CREDS=", "NATS_USER=", "NATS_PASSWORD=")
	return e
}

func (e *exposureEnv) serveArgs(extra ...string) []string {
	return append([]string{"serve", "--functions", e.fns, "--data", e.data, "--secrets-key-file", e.key}, extra...)
}

// TestServeRefusesExposure: each of these would put the host's NATS (job records, secrets,
// volumes) or its unauthenticated dashboard and /run on the network, or joins a NATS the user
// did not mean; serve must refuse at once, naming what it refused and the way out.
func TestServeRefusesExposure(t *testing.T) {
	cases := []struct {
		name  string
		env   []string
		args  func(e *exposureEnv) []string
		wants []string
	}{
		{"NATS on every interface without auth", nil, func(e *exposureEnv) []string {
			return e.serveArgs("--nats-listen", "0.0.0.0:"+port(t), "--http", freeAddr(t))
		}, []string{"refusing to serve NATS clients on 0.0.0.0", "--nats-auth", "--nats-listen 127.0.0.1:4222"}},
		{"HTTP on every interface", nil, func(e *exposureEnv) []string {
			return e.serveArgs("--nats-listen", freeAddr(t), "--http", "0.0.0.0:"+port(t))
		}, []string{"refusing --http 0.0.0.0", "without --http-token-file", "loopback", "reverse proxy", "/hooks/"}},
		{"HTTP on every interface with a token too short to guard it", nil, func(e *exposureEnv) []string {
			short := filepath.Join(e.dir, "http.token")
			os.WriteFile(short, []byte("secret\n"), 0o600)
			return e.serveArgs("--nats-listen", freeAddr(t), "--http", "0.0.0.0:"+port(t), "--http-token-file", short)
		}, []string{"--http-token-file", "at least 16"}},
		{"HTTP with no host", nil, func(e *exposureEnv) []string {
			return e.serveArgs("--nats-listen", freeAddr(t), "--http", ":"+port(t))
		}, []string{"refusing --http :", "loopback"}},
		{"--nats and --nats-listen together", nil, func(e *exposureEnv) []string {
			return e.serveArgs("--nats", "nats://127.0.0.1:1", "--nats-listen", freeAddr(t), "--http", freeAddr(t))
		}, []string{"--nats joins an existing NATS server, but --nats-listen configures the embedded one", "one or the other"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newExposureEnv(t, map[string]string{"hello.sh": "echo '\"hi\"'\n"})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, hostBin, tc.args(e)...)
			cmd.Env = append(e.env, tc.env...)
			out, err := cmd.CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("serve started and kept serving instead of refusing:\n%s", out)
			}
			if err == nil {
				t.Fatalf("serve exited 0:\n%s", out)
			}
			for _, w := range tc.wants {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

func port(t *testing.T) string {
	a := freeAddr(t)
	return a[strings.LastIndex(a, ":")+1:]
}

// startServe starts serve and waits until /healthz answers; it stops the server at cleanup.
func startServe(t *testing.T, e *exposureEnv, env []string, httpAddr string, args ...string) *syncBuffer {
	t.Helper()
	return startServeProc(t, e, env, httpAddr, args...).logs
}

// serveProc is a running `host serve`.
type serveProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	logs *syncBuffer
}

// kill ends the server with SIGKILL, as a crash would, and waits for it to be gone.
func (p *serveProc) kill() {
	p.cmd.Process.Kill()
	<-p.done
}

// startServeProc is startServe, keeping the process (to kill it).
func startServeProc(t *testing.T, e *exposureEnv, env []string, httpAddr string, args ...string) *serveProc {
	t.Helper()
	logs := &syncBuffer{}
	cmd := exec.Command(hostBin, append(e.serveArgs("--http", httpAddr), args...)...)
	cmd.Env = append(e.env, env...)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("serve logs:\n%s", logs.String())
		}
	})
	testwait.For(t, "serve to be healthy", 60*time.Second, func() error {
		select {
		case <-done:
			t.Fatalf("serve exited:\n%s", logs.String())
		default:
		}
		return healthz(httpAddr)
	})
	return &serveProc{cmd: cmd, done: done, logs: logs}
}

// TestServeExplicitListenIgnoresNATSURL: with $NATS_URL exported for the CLI commands, an
// explicit --nats-listen used to join $NATS_URL silently. It now serves the embedded server it
// was asked for, and the log says $NATS_URL is ignored and why.
func TestServeExplicitListenIgnoresNATSURL(t *testing.T) {
	e := newExposureEnv(t, map[string]string{"hello.sh": "echo '\"hi\"'\n"})
	natsAddr := freeAddr(t)
	logs := startServe(t, e, []string{"NATS_URL=nats://127.0.0.1:1"}, freeAddr(t), "--nats-listen", natsAddr)
	if !strings.Contains(logs.String(), "$NATS_URL is ignored: --nats-listen asks for the embedded NATS server") {
		t.Errorf("the log does not say $NATS_URL is ignored:\n%s", logs.String())
	}
	nc, err := nats.Connect("nats://" + natsAddr)
	if err != nil {
		t.Fatalf("no embedded server on --nats-listen %s: %v", natsAddr, err)
	}
	defer nc.Close()
	if reply, err := nc.Request("agent.call.hello", nil, 30*time.Second); err != nil || string(reply.Data) != `"hi"` {
		t.Fatalf("call through the embedded server: %v %v", reply, err)
	}
}

// TestServeNATSAuth: serve --nats-auth on every interface. Anonymous clients are turned away;
// the generated credentials are private; the host's CLI picks up the context serve wrote and
// works as hosts; the callers context invokes functions but cannot read the job records. The
// functions directory also holds a network: host function the operator did not allow: it is
// refused with a message naming the flag, and the rest serve.
func TestServeNATSAuth(t *testing.T) {
	e := newExposureEnv(t, map[string]string{
		"hello.sh": "echo \"\\\"hi $ARG_NAME\\\"\"\n",
		"net.sh":   "# sandbox\n# network: host\necho '\"out\"'\n",
	})
	natsPort := port(t)
	logs := startServe(t, e, nil, freeAddr(t), "--nats-auth", "--nats-listen", "0.0.0.0:"+natsPort)

	want := "net.sh: network: host lets the function reach everything the host can (its NATS included); refused unless the operator starts serve with --allow-network-host net"
	if !strings.Contains(logs.String(), want) {
		t.Errorf("serve's log lacks the refusal %q", want)
	}
	st, err := os.Stat(filepath.Join(e.data, "nats-auth.json"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("generated credentials: %v, mode %v; want mode 0600", err, st.Mode().Perm())
	}
	if nc, err := nats.Connect("nats://127.0.0.1:" + natsPort); err == nil {
		nc.Close()
		t.Fatal("an anonymous client connected to serve --nats-auth")
	}

	cli := func(args ...string) (string, string, error) {
		cmd := exec.Command(hostBin, args...)
		cmd.Env = e.env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}
	out, stderr, err := cli("invoke", "hello", `{"name":"Ada"}`, "--wait")
	if err != nil || strings.TrimSpace(out) != `"hi Ada"` {
		t.Fatalf("host invoke with the context serve selected: %q %q %v", out, stderr, err)
	}
	if out, stderr, err := cli("jobs", "--json"); err != nil || !strings.Contains(out, "hello") {
		t.Fatalf("host jobs as hosts: %q %q %v", out, stderr, err)
	}
	if _, stderr, err := cli("invoke", "net", "{}"); err == nil || !strings.Contains(stderr, "no host serves") {
		t.Errorf("the refused network: host function was invoked: %q %v", stderr, err)
	}
	if out, _, err := cli("--context", "host-callers", "jobs", "--json"); err == nil {
		t.Fatalf("callers read the job records: %s", out)
	}

	// The callers context, as an application (or `nats --context host-callers`) uses it.
	b, err := os.ReadFile(filepath.Join(e.dir, "config", "nats", "context", "host-callers.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		URL, User, Password string
		InboxPrefix         string `json:"inbox_prefix"`
	}
	json.Unmarshal(b, &c)
	if c.InboxPrefix != bus.CallersInboxPrefix {
		t.Fatalf("callers context %s: want inbox_prefix %s, the only inboxes the callers may read", b, bus.CallersInboxPrefix)
	}
	nc, err := nats.Connect(c.URL, nats.UserInfo(c.User, c.Password), nats.CustomInboxPrefix(c.InboxPrefix))
	if err != nil {
		t.Fatalf("callers context %s: %v", b, err)
	}
	defer nc.Close()
	if reply, err := nc.Request("agent.call.hello", []byte(`{"name":"Bo"}`), 30*time.Second); err != nil || string(reply.Data) != `"hi Bo"` {
		t.Fatalf("agent.call as callers: %v %v", reply, err)
	}
}

// TestCheckWarnsAboutNetworkHost: host check knows no serve flags, so it passes a network: host
// function but warns that serve will refuse it without --allow-network-host.
func TestCheckWarnsAboutNetworkHost(t *testing.T) {
	e := newExposureEnv(t, map[string]string{"x.sh": "# sandbox\n# network: host\necho 1\n", "y.sh": "echo 1\n"})
	warning := "warning: " + filepath.Join(e.fns, "x.sh") + ": network: host lets the function reach everything the host can (its NATS included); refused unless the operator starts serve with --allow-network-host x"
	cases := []struct {
		name string
		args []string
		warn bool
	}{
		{"no allow list", nil, true},
		{"allowed by name", []string{"--allow-network-host", "x"}, false},
		{"all allowed", []string{"--allow-network-host", "*"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := run(t, append([]string{"check", e.fns}, tc.args...)...)
			if code != 0 || !strings.Contains(stdout, "2 functions ok") {
				t.Fatalf("check failed (%d): %s %s", code, stdout, stderr)
			}
			if strings.Contains(stderr, warning) != tc.warn || strings.Contains(stderr, "y.sh") {
				t.Fatalf("check's warnings (want one: %v):\n%s\nwant %s", tc.warn, stderr, warning)
			}
		})
	}
}

// TestServeWithAuthConfig: the embedded server from examples/nats-auth.conf listens beyond
// loopback because it has users; the host authenticates as hosts with --user and --password, and
// without them serve stops at once saying how to pass credentials.
func TestServeWithAuthConfig(t *testing.T) {
	e := newExposureEnv(t, map[string]string{"hello.sh": "echo '\"hi\"'\n"})
	b, err := os.ReadFile("../../examples/nats-auth.conf")
	if err != nil {
		t.Fatal(err)
	}
	natsPort := port(t)
	conf := strings.Replace(string(b), "listen: 0.0.0.0:4222", "listen: 0.0.0.0:"+natsPort, 1)
	conf = strings.Replace(conf, `store_dir: "./data/nats"`, `store_dir: "`+filepath.Join(e.dir, "nats")+`"`, 1)
	confPath := filepath.Join(e.dir, "nats-auth.conf")
	os.WriteFile(confPath, []byte(conf), 0o600)
	env := []string{"HOSTS_PASSWORD=hosts-pw", "CALLERS_PASSWORD=callers-pw"}

	t.Run("without the host's credentials", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, hostBin, e.serveArgs("--nats-config", confPath, "--http", freeAddr(t))...)
		cmd.Env = append(e.env, env...)
		out, err := cmd.CombinedOutput()
		if err == nil || ctx.Err() != nil || !strings.Contains(string(out), "--user and --password") {
			t.Fatalf("serve without credentials: %v\n%s", err, out)
		}
	})
	t.Run("as hosts", func(t *testing.T) {
		startServe(t, e, env, freeAddr(t), "--nats-config", confPath, "--user", "hosts", "--password", "hosts-pw")
		nc, err := nats.Connect("nats://127.0.0.1:"+natsPort, nats.UserInfo("callers", "callers-pw"), nats.CustomInboxPrefix(bus.CallersInboxPrefix))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		if reply, err := nc.Request("agent.call.hello", nil, 30*time.Second); err != nil || string(reply.Data) != `"hi"` {
			t.Fatalf("agent.call as callers: %v %v", reply, err)
		}
	})
}

// TestSecondServeKeepsTheSelectedContext: `serve --nats-auth` wrote its NATS CLI contexts under
// /root/.config whatever $HOME said, and a second serve (another data directory and port)
// rewrote the selected context, so the CLI's next command went to the second server without a
// word. Contexts go under $HOME/.config; the second serve writes a context of its own, says so,
// and the selection still reaches the first.
func TestSecondServeKeepsTheSelectedContext(t *testing.T) {
	fns := map[string]string{"hello.sh": "echo '\"hi\"'\n"}
	first, second := newExposureEnv(t, fns), newExposureEnv(t, fns)
	home := filepath.Join(first.dir, "home")
	for _, e := range []*exposureEnv{first, second} {
		e.env = append(e.env, "XDG_CONFIG_HOME=", "HOME="+home)
	}
	firstPort, secondPort := port(t), port(t)
	startServe(t, first, nil, freeAddr(t), "--nats-auth", "--nats-listen", "127.0.0.1:"+firstPort)
	logs := startServe(t, second, nil, freeAddr(t), "--nats-auth", "--nats-listen", "127.0.0.1:"+secondPort)

	contexts := filepath.Join(home, ".config", "nats", "context")
	b, err := os.ReadFile(filepath.Join(contexts, "host.json"))
	if err != nil {
		t.Fatalf("no context under $HOME/.config: %v", err)
	}
	if !strings.Contains(string(b), ":"+firstPort) {
		t.Fatalf("the selected context host now reaches another server: %s", b)
	}
	if b, err := os.ReadFile(filepath.Join(home, ".config", "nats", "context.txt")); err != nil || strings.TrimSpace(string(b)) != "host" {
		t.Fatalf("selected context %q, %v; want host", b, err)
	}
	own := "host-" + secondPort
	if _, err := os.Stat(filepath.Join(contexts, own+".json")); err != nil {
		t.Fatalf("the second serve wrote no context of its own (%s): %v", own, err)
	}
	want := "reaches another server (or was not written by serve) and was left as it is, and so was the selected context; this server's context is"
	if !strings.Contains(logs.String(), want) || !strings.Contains(logs.String(), "pass --context "+own) {
		t.Errorf("the second serve's log does not say it kept the selected context:\n%s", logs.String())
	}

	cli := func(args ...string) (string, string, error) {
		cmd := exec.Command(hostBin, args...)
		cmd.Env = first.env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}
	id, stderr, err := cli("invoke", "hello")
	if err != nil {
		t.Fatalf("host invoke through the selected context: %s %v", stderr, err)
	}
	id = strings.TrimSpace(id)
	if out, stderr, err := cli("job", id); err != nil || !strings.Contains(out, `"function": "hello"`) {
		t.Fatalf("the job on the selected context's server: %s %s %v", out, stderr, err)
	}
	if _, _, err := cli("--context", own, "job", id); err == nil {
		t.Fatalf("the job went to the second server (%s)", own)
	}
}
