package cluster_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/host/internal/jailfs"
	"github.com/agenthost/host/internal/objstore"
	"github.com/agenthost/host/internal/testkit/natstest"
	"github.com/agenthost/host/internal/testkit/s3test"
)

// Binaries built once by TestMain: the host under test and a nats-server built from the
// module's own nats-server dependency, so that NATS nodes are real processes that can be
// killed with SIGKILL, frozen with SIGSTOP and restarted on the same store.
var (
	hostBin string
	natsBin string
)

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "cluster-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		root, err := filepath.Abs("../..")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		hostBin, natsBin = filepath.Join(dir, "host"), filepath.Join(dir, "nats-server")
		for out, pkg := range map[string]string{hostBin: "./cmd/host", natsBin: "github.com/nats-io/nats-server/v2"} {
			cmd := exec.Command("go", "build", "-o", out, pkg)
			cmd.Dir = root
			if b, err := cmd.CombinedOutput(); err != nil {
				fmt.Fprintf(os.Stderr, "build %s: %v\n%s", pkg, err, b)
				return 1
			}
		}
		return m.Run()
	}())
}

// requireJail skips, loudly, where the jail or root (UTS namespaces, tmpfs) is missing.
func requireJail(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("SKIPPED LOUDLY: bubblewrap (bwrap) is not installed; .ci/run installs it (apt-get install bubblewrap)")
	}
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED LOUDLY: these tests mount a tmpfs and run jails as another user, which needs root")
	}
}

// tempDir is a directory the jail user (65534) can traverse, removed when the test ends.
func tempDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A host the test killed could not unmount its jobs' trees (its next start would have).
		if err := jailfs.UnmountBeneath(dir); err != nil {
			t.Errorf("unmount what killed hosts left in %s: %v", dir, err)
		}
		if os.Getenv("CLUSTER_KEEP_DIRS") != "" {
			t.Logf("CLUSTER_KEEP_DIRS is set: %s and its logs are kept", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return dir
}

// freePort returns a port for a server a test starts. It picks from below Linux's ephemeral
// range (32768-60999 by default), never handing out a port twice in one test binary: a port the
// kernel chose for a listener and then freed is soon the local port of some outgoing
// connection (a route dialing another node), and a server started on it then fails with
// "address already in use".
func freePort(t testing.TB) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		p := 20000 + rand.IntN(12000)
		if portsGiven[p] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		l.Close()
		portsGiven[p] = true
		return p
	}
	t.Fatal("no free port found in 20000-31999")
	return 0
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// tail returns the last n lines of a file, for failure reports.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if !strings.Contains(l, " [INF] ") { // nats-server's notices: its banner, routes coming and going
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// proc is a child process that dies with the test binary (Pdeathsig) and can be killed,
// signalled and started again with the same command line.
type proc struct {
	t       testing.TB
	name    string
	args    []string
	logPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func newProc(t testing.TB, name, logPath string, args ...string) *proc {
	p := &proc{t: t, name: name, args: args, logPath: logPath}
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("---- last lines of %s (%s) ----\n%s", name, logPath, tail(logPath, 40))
		}
	})
	return p
}

// start runs the command, its output appended to the log file.
func (p *proc) start() {
	p.t.Helper()
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	fmt.Fprintf(f, "==== %s start %s\n", p.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.args[0], p.args[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		p.t.Fatalf("start %s: %v", p.name, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done, p.err = cmd, done, nil
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
}

func (p *proc) running() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// signal sends sig to the process if it runs.
func (p *proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd != nil && p.running() {
		_ = cmd.Process.Signal(sig)
	}
}

// wait waits for the process to exit and returns its exit error, or an error after within.
func (p *proc) wait(within time.Duration) error {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.err
	case <-time.After(within):
		return fmt.Errorf("%s still running after %s", p.name, within)
	}
}

// kill sends SIGKILL and waits until the process is gone. It returns when it was sent.
func (p *proc) kill() time.Time {
	at := time.Now()
	if p.running() {
		p.signal(syscall.SIGKILL)
		_ = p.wait(30 * time.Second)
	}
	return at
}

// ---- NATS ----

// natsNode is a real nats-server process with JetStream, alone or one node of a cluster.
type natsNode struct {
	*proc
	name       string
	port       int
	storeDir   string
	confPath   string
	maxPayload int
}

func (n *natsNode) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

// startNATS starts a single nats-server with JetStream on a free port.
func startNATS(t testing.TB, dir string, maxPayload int) *natsNode {
	t.Helper()
	n := &natsNode{name: "nats", port: freePort(t), storeDir: filepath.Join(dir, "nats-store"), maxPayload: maxPayload}
	n.write(t, dir, "")
	n.proc = newProc(t, "nats-server", filepath.Join(dir, "nats.log"), natsBin, "-c", n.confPath)
	n.start(t)
	return n
}

// start (re)starts the server on its port and store and waits until it takes clients.
func (n *natsNode) start(t testing.TB) {
	t.Helper()
	n.proc.start()
	n.waitUp(t)
}

func (n *natsNode) write(t testing.TB, dir, cluster string) {
	t.Helper()
	conf := fmt.Sprintf("server_name: %s\nlisten: 127.0.0.1:%d\njetstream { store_dir: %q }\n", n.name, n.port, n.storeDir)
	if n.maxPayload > 0 {
		conf += fmt.Sprintf("max_payload: %d\n", n.maxPayload)
	}
	conf += cluster
	n.confPath = filepath.Join(dir, n.name+".conf")
	writeFile(t, n.confPath, conf)
}

// waitUp waits until the server accepts connections.
func (n *natsNode) waitUp(t testing.TB) {
	t.Helper()
	ok := natstest.Poll(20*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", n.port), 200*time.Millisecond)
		if err != nil {
			return !n.running()
		}
		c.Close()
		return true
	})
	if !ok || !n.running() {
		t.Fatalf("nats-server %s did not start:\n%s", n.name, tail(n.logPath, 30))
	}
}

// startCluster starts size nodes with routes to each other on loopback and JetStream (each
// with its own store), and waits until JetStream has a meta leader and places R3 streams.
func startCluster(t testing.TB, dir string, size int) []*natsNode {
	t.Helper()
	nodes := make([]*natsNode, size)
	routes := make([]string, size)
	clusterPorts := make([]int, size)
	for i := range nodes {
		nodes[i] = &natsNode{name: fmt.Sprintf("n%d", i+1), port: freePort(t), storeDir: filepath.Join(dir, fmt.Sprintf("n%d-store", i+1))}
		clusterPorts[i] = freePort(t)
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", clusterPorts[i])
	}
	for i, n := range nodes {
		n.write(t, dir, fmt.Sprintf("cluster { name: agentc\n listen: 127.0.0.1:%d\n routes: [%s]\n}\n", clusterPorts[i], strings.Join(routes, ", ")))
		n.proc = newProc(t, "nats-"+n.name, filepath.Join(dir, n.name+".log"), natsBin, "-c", n.confPath)
		n.proc.start()
	}
	for _, n := range nodes {
		n.waitUp(t)
	}
	return nodes
}

// ---- S3 ----

// versity is a versitygw process that can be stopped and started again on the same port and
// directory: the S3 store going down for a while.
type versity struct {
	*proc
	addr string
	dir  string
	cfg  objstore.S3Config
}

func startVersity(t testing.TB, dir string) *versity {
	t.Helper()
	bin, err := s3test.Binary()
	if err != nil {
		if os.Getenv("S3TEST_REQUIRE") != "" {
			t.Fatalf("S3TEST_REQUIRE is set but %v", err)
		}
		t.Skipf("SKIPPED LOUDLY: %v", err)
	}
	v := &versity{addr: fmt.Sprintf("127.0.0.1:%d", freePort(t)), dir: filepath.Join(dir, "s3")}
	if err := os.MkdirAll(v.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	v.proc = newProc(t, "versitygw", filepath.Join(dir, "versitygw.log"), bin,
		"--access", s3test.AccessKey, "--secret", s3test.SecretKey, "--port", v.addr, "--quiet", "posix", v.dir)
	v.cfg = objstore.S3Config{Endpoint: v.addr, Bucket: "volumes", AccessKey: s3test.AccessKey, SecretKey: s3test.SecretKey, Region: "us-east-1"}
	v.start(t)
	return v
}

func (v *versity) start(t testing.TB) {
	t.Helper()
	v.proc.start()
	client := &http.Client{Timeout: time.Second}
	ok := natstest.Poll(30*time.Second, func() bool {
		resp, err := client.Get("http://" + v.addr + "/")
		if err != nil {
			return !v.running()
		}
		resp.Body.Close()
		return true
	})
	if !ok || !v.running() {
		t.Fatalf("versitygw did not start on %s:\n%s", v.addr, tail(v.logPath, 30))
	}
}

// ---- hosts ----

// hostOpts describe one `host serve` process.
type hostOpts struct {
	// name is the host's id in job records (--host-id); empty leaves the default, as two hosts
	// started side by side by a user would have.
	name     string
	natsURL  string
	fnDir    string
	keyFile  string
	ackWait  time.Duration
	replicas int
	s3       *objstore.S3Config
	dataDir  string // default: a fresh directory
	extra    []string
}

// hostProc is a `host serve` process on an external NATS.
type hostProc struct {
	*proc
	o    hostOpts
	data string
	http string
}

func startHost(t testing.TB, dir string, o hostOpts) *hostProc {
	t.Helper()
	h := newHost(t, dir, o)
	h.start(t)
	return h
}

func newHost(t testing.TB, dir string, o hostOpts) *hostProc {
	t.Helper()
	label := o.name
	if label == "" {
		label = fmt.Sprintf("host-%d", freePort(t))
	}
	h := &hostProc{o: o, data: o.dataDir, http: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	if h.data == "" {
		h.data = filepath.Join(dir, label+"-data")
	}
	if o.ackWait == 0 {
		o.ackWait = 5 * time.Second
	}
	serve := []string{hostBin, "serve", "--nats", o.natsURL, "--functions", o.fnDir, "--data", h.data, "--http", h.http,
		"--ack-wait", o.ackWait.String(), "--secrets-key-file", o.keyFile, "--log-level", "warn"}
	if o.replicas > 0 {
		serve = append(serve, "--replicas", strconv.Itoa(o.replicas))
	}
	if o.s3 != nil {
		serve = append(serve, "--s3-endpoint", o.s3.Endpoint, "--s3-bucket", o.s3.Bucket,
			"--s3-access-key", o.s3.AccessKey, "--s3-secret-key", o.s3.SecretKey, "--s3-region", o.s3.Region)
	}
	if o.name != "" {
		// The host's id in job records, so tests can tell which host ran what.
		serve = append(serve, "--host-id", o.name)
	}
	serve = append(serve, o.extra...)
	h.proc = newProc(t, label, filepath.Join(dir, label+".log"), serve...)
	return h
}

// start (re)starts the host and waits until /healthz says it takes jobs.
func (h *hostProc) start(t testing.TB) {
	t.Helper()
	h.proc.start()
	if !h.waitReady(60 * time.Second) {
		t.Fatalf("host %s did not become ready:\n%s", h.name, tail(h.logPath, 40))
	}
}

func (h *hostProc) waitReady(within time.Duration) bool {
	return natstest.Poll(within, func() bool { return !h.running() || h.healthy() }) && h.running()
}

func (h *hostProc) healthy() bool {
	client := &http.Client{Timeout: time.Second}
	resp, err := client.Get("http://" + h.http + "/healthz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// metric sums the samples of a Prometheus metric whose labels include all of want.
func (h *hostProc) metric(name string, want ...string) float64 {
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get("http://" + h.http + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(line, w)
		}
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// logText is everything the process has logged so far, over all its restarts.
func (p *proc) logText() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// waitLog polls the host's log for a line containing every one of parts.
func (h *hostProc) waitLog(within time.Duration, parts ...string) (string, bool) {
	var found string
	ok := natstest.Poll(within, func() bool {
		for _, line := range strings.Split(h.logText(), "\n") {
			all := true
			for _, p := range parts {
				all = all && strings.Contains(line, p)
			}
			if all {
				found = line
				return true
			}
		}
		return false
	})
	return found, ok
}

// runCLI runs a host client command and returns its stdout.
func runCLI(t testing.TB, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, hostBin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("host %s: %w: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}
