package egress

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/host/internal/jailinit"
	"github.com/agenthost/host/internal/jailinit/initbin"
)

// Paths inside the test jail, laid out as the package comment asks of the
// host: the jail init read-only under /host/bin, the job's socket
// directory read-only under /host/egress.
const (
	jailBin    = "/host/bin/" + initbin.Name
	jailSocket = "/host/egress/egress.sock"
	jailData   = "/host/data"
	jailUID    = 65534
)

// jailFixture runs commands in a bubblewrap jail with its own network
// namespace, as the jail's unprivileged user, under the egress init.
type jailFixture struct {
	bwrap   string
	binDir  string // holds the jail init, as the host installs it
	dataDir string // CA certificate and scripts
}

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

func newJail(t *testing.T) *jailFixture {
	t.Helper()
	bw, err := exec.LookPath("bwrap")
	if err != nil {
		t.Skip("SKIPPING JAIL TEST: bwrap is not installed (apt-get install bubblewrap); the in-jail path is NOT being tested")
	}
	// The very init the host embeds and installs; one serves the whole run.
	binOnce.Do(func() { binDir, binErr = installInit() })
	if binErr != nil {
		t.Fatal(binErr)
	}
	j := &jailFixture{bwrap: bw, binDir: binDir, dataDir: shortTempDir(t)}
	writeFile(t, filepath.Join(j.dataDir, "ca.pem"), getCA(t).pem, 0o644)
	return j
}

func installInit() (string, error) {
	dir, err := os.MkdirTemp("", "egr-bin-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	_, err = initbin.Install(dir)
	return dir, err
}

// jailOwner is the host uid the jail runs as and the socket is handed to:
// nobody when the tests run as root, else the tests' own user.
func jailOwner() (uid, gid int) {
	if os.Geteuid() == 0 {
		return jailUID, jailUID
	}
	return -1, -1
}

// needTool skips, loudly, a test whose client is not installed where the
// jail can see it (the jail binds /usr and the top-level links into it).
func needTool(t *testing.T, argv []string) {
	t.Helper()
	name := argv[0]
	if name == "env" || name == "sh" {
		return
	}
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("SKIPPING: %s is not installed; egress through it is NOT being tested", name)
	}
}

type jailResult struct {
	stdout, stderr string
	code           int
}

// run runs argv in the jail under the egress init with the proxy socket
// directory sockDir. extra are bwrap options (--as-pid-1), env is added to
// the proxy environment.
func (j *jailFixture) run(t *testing.T, sockDir string, extra, env []string, argv ...string) jailResult {
	t.Helper()
	needTool(t, argv)
	args := []string{
		// No --share-net: the jail's network namespace has only lo.
		"--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
		"--ro-bind", "/usr", "/usr",
	}
	for _, p := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				t.Fatal(err)
			}
			args = append(args, "--symlink", target, p)
		case fi.IsDir():
			args = append(args, "--ro-bind", p, p)
		}
	}
	args = append(args,
		"--ro-bind", "/etc", "/etc",
		"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
		"--ro-bind", j.binDir, filepath.Dir(jailBin),
		"--ro-bind", sockDir, filepath.Dir(jailSocket),
		"--ro-bind", j.dataDir, jailData,
		"--chdir", "/tmp",
	)
	args = append(args, extra...)
	args = append(args, "--")
	args = append(args, jailinit.Argv(jailBin, jailSocket, DefaultListen, argv)...)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, j.bwrap, args...)
	cmd.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8"}, Env(DefaultListen)...)
	cmd.Env = append(cmd.Env, env...)
	cmd.Dir = "/"
	if os.Geteuid() == 0 {
		// bwrap started by root maps the jail's user to host root; started
		// as nobody, the jail is nobody (as internal/sandbox does it).
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: jailUID, Gid: jailUID, Groups: []uint32{}}}
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	res := jailResult{stdout: out.String(), stderr: errb.String()}
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	default:
		t.Fatalf("bwrap: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("jail timed out; stdout %q stderr %q", res.stdout, res.stderr)
	}
	return res
}

func (r jailResult) String() string {
	return fmt.Sprintf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
}

// jailProxy serves a proxy for one jailed job; it returns the socket dir.
func jailProxy(t *testing.T, o Options, pol Policy) string {
	t.Helper()
	dir := shortTempDir(t)
	uid, gid := jailOwner()
	c, err := New(o).Listen(context.Background(), filepath.Join(dir, filepath.Base(jailSocket)), uid, gid, pol)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return dir
}

func permit127() []netip.Prefix { return []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")} }

// jailTargets are an HTTPS and a plain-HTTP server on the host's loopback,
// and the proxy options and policy that allow exactly them by name.
type jailTargets struct {
	tls, plain *testServer
	dns        *fakeDNS
	allow      []string
}

func newJailTargets(t *testing.T) *jailTargets {
	jt := &jailTargets{
		tls:   startServer(t, true, helloHandler("hello from target")),
		plain: startServer(t, false, helloHandler("plain")),
		dns:   staticDNS(map[string][]string{targetName: {"127.0.0.1"}, "plain.egress.test": {"127.0.0.1"}}),
	}
	jt.allow = []string{fmt.Sprintf("%s:%d", targetName, jt.tls.port), fmt.Sprintf("plain.egress.test:%d", jt.plain.port)}
	return jt
}

func (jt *jailTargets) httpsURL(path string) string {
	return fmt.Sprintf("https://%s:%d%s", targetName, jt.tls.port, path)
}

func (jt *jailTargets) httpURL(path string) string {
	return fmt.Sprintf("http://plain.egress.test:%d%s", jt.plain.port, path)
}

// Client commands, each printing the response body (Bun: status and body).
func curlCmd(u string) []string {
	return []string{"curl", "-sS", "--fail-with-body", "--max-time", "60", "--cacert", jailData + "/ca.pem", u}
}

func pythonCmd(u string) []string {
	return []string{"/usr/bin/python3", "-c", "import sys, urllib.request\nprint(urllib.request.urlopen(sys.argv[1], timeout=60).read().decode())", u}
}

func bunCmd(u string) []string {
	return []string{"bun", "-e", `
try {
  const r = await fetch(process.argv.at(-1));
  console.log(r.status, await r.text());
} catch (e) {
  console.log("ERR", e.code, e.message);
  process.exit(3);
}`, u}
}

var (
	// Python's ssl and OpenSSL read SSL_CERT_FILE; Bun 1.4.4 reads
	// NODE_EXTRA_CA_CERTS (added to its bundled roots) and SSL_CERT_FILE.
	pythonCA = "SSL_CERT_FILE=" + jailData + "/ca.pem"
	bunCA    = "NODE_EXTRA_CA_CERTS=" + jailData + "/ca.pem"
)

func TestJailClientsThroughProxy(t *testing.T) {
	j := newJail(t)
	jt := newJailTargets(t)
	log, logs := observed()
	sock := jailProxy(t, Options{Log: log, LookupIP: jt.dns.lookup, Permit: permit127()},
		Policy{Allow: jt.allow, Job: "job-7", Function: "agent"})
	cases := []struct {
		name string
		env  []string
		argv []string
		want string
	}{
		{"curl https", nil, curlCmd(jt.httpsURL("/curl")), "hello from target /curl"},
		{"curl http", nil, curlCmd(jt.httpURL("/curl")), "plain /curl"},
		{"python https", []string{pythonCA}, pythonCmd(jt.httpsURL("/python")), "hello from target /python\n"},
		{"python http", nil, pythonCmd(jt.httpURL("/python")), "plain /python\n"},
		{"bun https", []string{bunCA}, bunCmd(jt.httpsURL("/bun")), "200 hello from target /bun\n"},
		{"bun http", nil, bunCmd(jt.httpURL("/bun")), "200 plain /bun\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			logs.TakeAll()
			r := j.run(t, sock, nil, tc.env, tc.argv...)
			if r.code != 0 || r.stdout != tc.want {
				t.Fatalf("want stdout %q\n%s", tc.want, r)
			}
			var allowed int
			for _, e := range logs.FilterMessage("egress decision").All() {
				m := e.ContextMap()
				if m["decision"] != "allowed" || m["job"] != "job-7" || m["function"] != "agent" {
					t.Errorf("decision %v", m)
				}
				allowed++
			}
			if allowed == 0 {
				t.Error("no decision was logged: did the request bypass the proxy?")
			}
		})
	}
}

// TestJailDeniedWithoutPermit: the same requests with no Permit prefix are
// refused (the target is on loopback), every client shows the reason, and
// nothing reaches the server.
func TestJailDeniedWithoutPermit(t *testing.T) {
	j := newJail(t)
	jt := newJailTargets(t)
	sock := jailProxy(t, Options{LookupIP: jt.dns.lookup}, Policy{Allow: jt.allow})
	before := jt.tls.conns.Load()
	reason := "403 egress denied: " + targetName + " resolves to 127.0.0.1, a loopback address; ask the operator to permit it"
	cases := []struct {
		name     string
		env      []string
		argv     []string
		code     int
		inStdout string
		inStderr string
	}{
		{"curl", nil, curlCmd(jt.httpsURL("/")), 56, "", "CONNECT tunnel failed, response 403"},
		{"python", []string{pythonCA}, pythonCmd(jt.httpsURL("/")), 1, "", "Tunnel connection failed: " + reason},
		{"bun", []string{bunCA}, bunCmd(jt.httpsURL("/")), 3, "ERR ERR_PROXY_TUNNEL Proxy refused to open a tunnel: " + reason, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := j.run(t, sock, nil, tc.env, tc.argv...)
			if r.code != tc.code || !strings.Contains(r.stdout, tc.inStdout) || !strings.Contains(r.stderr, tc.inStderr) {
				t.Fatalf("want exit %d, stdout with %q, stderr with %q\n%s", tc.code, tc.inStdout, tc.inStderr, r)
			}
		})
	}
	syncServer(t, jt.tls)
	if got := jt.tls.conns.Load() - before; got != 1 {
		t.Fatalf("the server accepted %d connections besides the test's own", got-1)
	}
}

// TestJailHasNoRoute: inside the jail there is only lo, no route, and the
// host's loopback services are not the jail's.
func TestJailHasNoRoute(t *testing.T) {
	j := newJail(t)
	jt := newJailTargets(t)
	sock := jailProxy(t, Options{LookupIP: jt.dns.lookup, Permit: permit127()}, Policy{Allow: jt.allow})
	before := jt.tls.conns.Load()
	direct := fmt.Sprintf("https://127.0.0.1:%d/", jt.tls.port)
	r := j.run(t, sock, nil, nil, "sh", "-c", `
curl -sS --noproxy '*' --max-time 60 --cacert `+jailData+`/ca.pem "$1"; echo "curl exit $?"
echo interfaces: $(tail -n +3 /proc/net/dev | cut -d: -f1)
echo ipv4 routes: $(tail -n +2 /proc/net/route | wc -l)
if [ -e /proc/net/ipv6_route ]; then echo ipv6 routes: $(grep -vc ' lo$' /proc/net/ipv6_route); else echo ipv6 routes: no IPv6; fi`, "sh", direct)
	// A kernel booted with ipv6.disable=1 has no IPv6 in any namespace, so no
	// /proc/net/ipv6_route: then there is no IPv6 route to check, and the jail
	// must not have one either.
	wantV6 := "ipv6 routes: 0"
	if _, err := os.Stat("/proc/net/ipv6_route"); err != nil {
		wantV6 = "ipv6 routes: no IPv6"
		t.Logf("THIS KERNEL HAS NO IPv6 (%v): checking the jail's IPv4 routes only, and that it has no IPv6 either", err)
	}
	for _, want := range []string{"curl exit 7", "interfaces: lo", "ipv4 routes: 0", wantV6} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("want %q\n%s", want, r)
		}
	}
	if !strings.Contains(r.stderr, "Connection refused") && !strings.Contains(r.stderr, "Couldn't connect") {
		t.Errorf("the direct connection did not fail to connect\n%s", r)
	}
	syncServer(t, jt.tls)
	if got := jt.tls.conns.Load() - before; got != 1 {
		t.Fatalf("the server accepted %d connections from the jail", got-1)
	}
}

// zombieScript leaves a grandchild to be reaped by whoever it is
// re-parented to, waits (bounded) for it to vanish, and reports any zombie
// left among the init's children.
const zombieScript = `
import os, time
r, w = os.pipe()
a = os.fork()
if a == 0:
    b = os.fork()
    if b == 0:
        os._exit(0)              # the grandchild exits at once...
    os.write(w, b"%d" % b)
    os._exit(0)                  # ...and its parent never waits for it
os.close(w)
os.waitpid(a, 0)
b = int(os.read(r, 32))
while os.read(r, 32):            # EOF: the grandchild has exited too
    pass

def stat(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
            return fields[0], int(fields[1])
    except (FileNotFoundError, ProcessLookupError):  # gone meanwhile
        return None, None

deadline = time.monotonic() + 60
while stat(b)[0] is not None and time.monotonic() < deadline:
    time.sleep(0.005)
state = stat(b)[0]
print("grandchild", "reaped" if state is None else "left in state " + state)
init = os.getppid()
zombies = [p for p in os.listdir("/proc") if p.isdigit() and stat(int(p)) == ("Z", init)]
print("zombies of init:", len(zombies))
with open("/proc/1/cmdline", "rb") as f:
    print("pid 1:", f.read().split(b"\0")[0].decode())
`

func TestJailReapsZombies(t *testing.T) {
	j := newJail(t)
	sock := jailProxy(t, Options{}, Policy{})
	for _, tc := range []struct {
		name  string
		extra []string
	}{
		{"init as pid 1", []string{"--as-pid-1"}},
		{"init under bwrap's reaper", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := j.run(t, sock, tc.extra, nil, "/usr/bin/python3", "-c", zombieScript)
			if r.code != 0 || !strings.Contains(r.stdout, "grandchild reaped\nzombies of init: 0\n") {
				t.Fatalf("%s", r)
			}
			if tc.extra != nil && !strings.Contains(r.stdout, "pid 1: "+jailBin) {
				t.Errorf("the init is not pid 1\n%s", r)
			}
		})
	}
}

func TestJailExitStatus(t *testing.T) {
	j := newJail(t)
	sock := jailProxy(t, Options{}, Policy{})
	for _, tc := range []struct {
		script string
		code   int
	}{
		{"exit 0", 0},
		{"exit 3", 3},
		{"kill -KILL $$", 128 + 9},
		{"kill -TERM $$", 128 + 15},
	} {
		if r := j.run(t, sock, []string{"--as-pid-1"}, nil, "sh", "-c", tc.script); r.code != tc.code {
			t.Errorf("%q: want exit %d\n%s", tc.script, tc.code, r)
		}
	}
}

// fakeMessagesAPI answers POST /v1/messages like the Anthropic API, with a
// fixed reply, streamed or not as asked, and counts the calls.
func fakeMessagesAPI(calls *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
			http.NotFound(w, r)
			return
		}
		calls.Add(1)
		var req struct {
			Stream bool `json:"stream"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"pong from the fake model"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":5}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range [][2]string{
			{"message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}}`},
			{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"pong from the fake model"}}`},
			{"content_block_stop", `{"type":"content_block_stop","index":0}`},
			{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":5}}`},
			{"message_stop", `{"type":"message_stop"}`},
		} {
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev[0], ev[1])
		}
	})
}

// TestJailClaudeCode runs the real Claude Code CLI in the jail against a
// fake Messages API that the proxy reaches by name: the agent's own HTTP
// stack must honour HTTPS_PROXY and the extra CA.
func TestJailClaudeCode(t *testing.T) {
	if _, err := exec.LookPath("claude"); err != nil {
		t.Skip("SKIPPING: Claude Code is not installed (scripts/setup installs it)")
	}
	j := newJail(t)
	var calls atomic.Int64
	srv := startServer(t, true, fakeMessagesAPI(&calls))
	log, logs := observed()
	dns := staticDNS(map[string][]string{targetName: {"127.0.0.1"}})
	sock := jailProxy(t, Options{Log: log, LookupIP: dns.lookup, Permit: permit127()},
		Policy{Allow: []string{fmt.Sprintf("%s:%d", targetName, srv.port)}})
	r := j.run(t, sock, nil, []string{
		bunCA,
		fmt.Sprintf("ANTHROPIC_BASE_URL=https://%s:%d", targetName, srv.port),
		"ANTHROPIC_API_KEY=sk-ant-egress-test",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
	}, "claude", "-p", "--model", "claude-sonnet-4-5", "say pong")
	if r.code != 0 || r.stdout != "pong from the fake model\n" || calls.Load() == 0 {
		t.Fatalf("%d API calls\n%s", calls.Load(), r)
	}
	for _, e := range logs.FilterMessage("egress decision").All() {
		if m := e.ContextMap(); m["decision"] != "allowed" {
			t.Errorf("Claude Code was refused: %v", m)
		}
	}
}
