package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/testwait"
)

// eventEnv is `host serve --nats-auth` of an example flow's functions and a gate function,
// which a test crashes and starts again, and a connection to it as the hosts user.
type eventEnv struct {
	e          *exposureEnv
	natsAddr   string
	httpAddr   string
	args       []string
	p          *serveProc
	gate       string // the gate function's directory: start, done (lines it wrote) and go
	hosts      *nats.Conn
	jobs       *jobs.Store
	hostsLogin []string
}

// gateFn starts (a line in start), waits for the file go, then ends (a line in done): a run
// in progress that a test can crash the host under. Its mark is the object's key or n. It is
// not jailed (so it can write here), and an unjailed run is no child the kernel ends with the
// host: it ends itself when its parent is gone, as it would if the machine had crashed.
const gateFn = `# on: %ON%
# env: GATE=%DIR%
import os, time


def main(key: str = "", n: int = 0):
    mark = key or str(n)
    d = os.environ["GATE"]
    with open(d + "/start", "a") as f:
        f.write(mark + "\n")
    parent = os.getppid()
    while not os.path.exists(d + "/go"):
        if os.getppid() != parent:
            os._exit(1)  # the host died: an unjailed run outlives it, a machine's crash would not
        time.sleep(0.05)
    with open(d + "/done", "a") as f:
        f.write(mark + "\n")
    return {"mark": mark}
`

func newEventEnv(t *testing.T, example, gateOn string, args ...string) *eventEnv {
	t.Helper()
	files := map[string]string{}
	entries, err := os.ReadDir(example)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		if strings.HasSuffix(en.Name(), ".py") {
			b, err := os.ReadFile(filepath.Join(example, en.Name()))
			if err != nil {
				t.Fatal(err)
			}
			files[en.Name()] = string(b)
		}
	}
	e := newExposureEnv(t, files)
	v := &eventEnv{e: e, natsAddr: freeAddr(t), httpAddr: freeAddr(t), gate: filepath.Join(e.dir, "gate")}
	os.MkdirAll(v.gate, 0o755)
	os.WriteFile(filepath.Join(e.fns, "gate.py"), []byte(strings.NewReplacer("%ON%", gateOn, "%DIR%", v.gate).Replace(gateFn)), 0o644)
	v.args = append([]string{"--nats-auth", "--nats-listen", v.natsAddr, "--ack-wait", "5s"}, args...)
	v.p = startServeProc(t, e, nil, v.httpAddr, v.args...)
	auth, err := bus.LoadOrCreateAuth(filepath.Join(e.data, "nats-auth.json"))
	if err != nil {
		t.Fatal(err)
	}
	v.hostsLogin = []string{"--nats", "nats://" + v.natsAddr, "--user", auth.Hosts.User, "--password", auth.Hosts.Password}
	v.hosts, err = bus.Connect(context.Background(), bus.ConnectOptions{URL: "nats://" + v.natsAddr, User: auth.Hosts.User, Password: auth.Hosts.Password, Name: "test"}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.hosts.Close)
	js, _ := jetstream.New(v.hosts)
	if v.jobs, err = jobs.Bind(context.Background(), js); err != nil {
		t.Fatal(err)
	}
	return v
}

// addLogin gives name a NATS login with topics, as an operator would, and returns its token.
func (v *eventEnv) addLogin(t *testing.T, name, topics string) string {
	t.Helper()
	env := append(v.e.env, "NATS_URL=nats://"+v.natsAddr)
	out, errOut, code := runIn(t, env, append(v.hostsLogin[2:], "users", "add", name, "--role", "viewer", "--nats", "--topics", topics)...)
	if code != 0 || !strings.Contains(errOut, "the NATS login of "+name+" is in effect") {
		t.Fatalf("users add %s: exit %d\n%s", name, code, errOut)
	}
	return strings.TrimSpace(out)
}

// runs are the jobs of fn that match keep.
func (v *eventEnv) runs(t *testing.T, fn string, keep func(*jobs.Record) bool) []*jobs.Record {
	t.Helper()
	recs, err := v.jobs.Recent(context.Background(), jobs.Filter{Function: fn}, 0)
	if err != nil {
		return nil // NATS is coming back after a restart: the caller polls again
	}
	var out []*jobs.Record
	for _, r := range recs {
		if keep == nil || keep(r) {
			out = append(out, r)
		}
	}
	return out
}

// succeeded waits for one succeeded job of fn whose arguments contain arg, and returns it.
func (v *eventEnv) succeeded(t *testing.T, fn, arg string) *jobs.Record {
	t.Helper()
	var rec *jobs.Record
	testwait.For(t, fn+" to succeed with "+arg, 2*time.Minute, func() error {
		rs := v.runs(t, fn, func(r *jobs.Record) bool { return strings.Contains(string(r.Args), arg) })
		if len(rs) == 0 || rs[0].Status != jobtype.Succeeded {
			return errNotYet(fn, rs)
		}
		rec = rs[0]
		return nil
	})
	return rec
}

func (v *eventEnv) waitLog(t *testing.T, parts ...string) {
	t.Helper()
	testwait.For(t, "the host to log "+strings.Join(parts, " … "), time.Minute, func() error {
		for line := range strings.SplitSeq(v.p.logs.String(), "\n") {
			if containsAll(line, parts) {
				return nil
			}
		}
		return errNotYet("log line", nil)
	})
}

// crashDuringGate waits for the gate function to have started mark, kills the host (SIGKILL)
// while it runs, starts it again on the same data, opens the gate, and checks that the run
// ends once: one succeeded job, one line in done.
func (v *eventEnv) crashDuringGate(t *testing.T, mark string) {
	t.Helper()
	testwait.For(t, "the gate function to start "+mark, 2*time.Minute, func() error {
		b, _ := os.ReadFile(filepath.Join(v.gate, "start"))
		if !strings.Contains(string(b), mark+"\n") {
			return errNotYet("start", nil)
		}
		return nil
	})
	v.p.kill()
	v.p = startServeProc(t, v.e, nil, v.httpAddr, v.args...)
	os.WriteFile(filepath.Join(v.gate, "go"), nil, 0o644)
	rec := v.succeeded(t, "gate", mark)
	if rs := v.runs(t, "gate", nil); len(rs) != 1 {
		t.Errorf("gate jobs after the crash: %d, want 1", len(rs))
	}
	b, _ := os.ReadFile(filepath.Join(v.gate, "done"))
	if string(b) != mark+"\n" {
		t.Errorf("gate runs that ended: %q, want one %q", b, mark)
	}
	t.Logf("gate job %s: %d attempts, result %s", rec.ID, rec.Attempts, rec.Result)
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

type notYet struct {
	what string
	n    int
}

func (e notYet) Error() string { return e.what + " not yet" }

func errNotYet(what string, rs []*jobs.Record) error { return notYet{what, len(rs)} }

// requireMosquitto finds mosquitto_pub and mosquitto_sub (Debian's mosquitto-clients); it
// skips, loudly, without them, or fails when MOSQUITTO_REQUIRE is set (CI).
func requireMosquitto(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"mosquitto_pub", "mosquitto_sub"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("MOSQUITTO_REQUIRE") != "" {
				t.Fatalf("MOSQUITTO_REQUIRE is set but %s is missing: apt-get install mosquitto-clients (scripts/setup does)", tool)
			}
			t.Skipf("\n\n*** SKIPPING MQTT TESTS: %s is missing; apt-get install mosquitto-clients (scripts/setup does) ***\n\n", tool)
		}
	}
}
