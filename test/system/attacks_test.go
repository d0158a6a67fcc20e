package system_test

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/testkit/testwait"
)

// attack is one hostile script run as a sandboxed function. check gets the reply (the result,
// or the error event) and says what went wrong, if anything.
type attack struct {
	name   string
	file   string
	script string
	check  func(reply string, failed bool) string
}

// wants expects the run to succeed with a report containing every substring.
func wants(substrings ...string) func(string, bool) string {
	return func(reply string, failed bool) string {
		if failed {
			return "the attack script itself failed: " + reply
		}
		for _, s := range substrings {
			if !strings.Contains(reply, s) {
				return fmt.Sprintf("report %s lacks %q", reply, s)
			}
		}
		return ""
	}
}

// failsWith expects the run to fail with an error mentioning every substring.
func failsWith(substrings ...string) func(string, bool) string {
	return func(reply string, failed bool) string {
		if !failed {
			return "the run succeeded: " + reply
		}
		for _, s := range substrings {
			if !strings.Contains(reply, s) {
				return fmt.Sprintf("error %s lacks %q", reply, s)
			}
		}
		return ""
	}
}

// TestAttacksAreContained runs hostile scripts in the jail. Each must be contained, and the host
// must serve a normal call after each one.
func TestAttacksAreContained(t *testing.T) {
	t.Setenv("HOST_ONLY_SECRET", "s3cr3t-in-host-env")
	natsProbe := "127.0.0.1:4222"
	attacks := []attack{
		{"read /etc/shadow", "shadow.sh", `# sandbox
if cat /etc/shadow >/dev/null 2>&1; then echo '"READ"'; else echo '"denied"'; fi`, wants(`"denied"`)},
		{"read /root", "root.sh", `# sandbox
if ls /root >/dev/null 2>&1 && [ -n "$(ls -A /root 2>/dev/null)" ]; then echo '"LISTED"'; else echo '"absent"'; fi`, wants(`"absent"`)},
		{"read the host's data directory", "datadir.sh", `# sandbox
found=none
for d in /tmp/host-test-* /work /var/lib/nats /data; do [ -e "$d" ] && found="$d"; done
ls / > /dev/null
echo "\"$found\""`, wants(`"none"`)},
		{"read the host's environment", "environ.py", `# sandbox
import os
seen = [k for k in os.environ if "HOST_ONLY" in k or "NATS" in k or "AWS" in k]
try:
    init_env = open("/proc/1/environ").read()
except Exception as e:
    init_env = ""
def main():
    return {"leaked": seen, "init_env_leak": "s3cr3t" in init_env}`, wants(`"leaked":[]`, `"init_env_leak":false`)},
		{"write to system directories", "writesys.sh", `# sandbox
r=""
for f in /usr/bin/evil /etc/evil /bin/evil /lib/evil /host/fn/evil /host/shims/evil; do
  if touch "$f" 2>/dev/null; then r="$r WROTE:$f"; fi
done
echo "\"ok$r\""`, wants(`"ok"`)},
		{"connect to the host's NATS", "nats.py", fmt.Sprintf(`# sandbox
import socket
def main():
    try:
        socket.create_connection(("%s", %s), timeout=2).close()
        return "CONNECTED"
    except OSError as e:
        return "refused"`, strings.Split(natsProbe, ":")[0], strings.Split(natsProbe, ":")[1]), wants(`"refused"`)},
		{"connect to cloud metadata", "metadata.py", `# sandbox
import socket
def main():
    try:
        socket.create_connection(("169.254.169.254", 80), timeout=2).close()
        return "CONNECTED"
    except OSError:
        return "unreachable"`, wants(`"unreachable"`)},
		{"connect to private ranges", "private.py", `# sandbox
import socket
def main():
    out = []
    for ip in ["10.0.0.1", "172.16.0.1", "192.168.1.1"]:
        try:
            socket.create_connection((ip, 80), timeout=1).close()
            out.append("CONNECTED " + ip)
        except OSError:
            pass
    return out`, wants(`[]`)},
		{"resolve names (DNS exfiltration)", "dns.py", `# sandbox
import socket
def main():
    try:
        socket.getaddrinfo("exfil.example.com", 80)
        return "RESOLVED"
    except OSError:
        return "no dns"`, wants(`"no dns"`)},
		{"fork bomb", "forkbomb.sh", `# sandbox
# timeout: 30s
:(){ :|:& };:
sleep 5
echo '"survived"'`, func(reply string, failed bool) string {
			if failed && !strings.Contains(reply, "pids") && !strings.Contains(reply, "timeout") {
				return "failed without naming the limit: " + reply
			}
			return ""
		}},
		{"memory bomb", "membomb.py", `# sandbox
# memory: 64Mi
def main():
    hog = []
    while True:
        hog.append(bytearray(16 << 20))`, failsWith("memory", "64Mi")},
		{"busy loop past its timeout", "spin.sh", `# sandbox
# timeout: 1s
while :; do :; done`, failsWith("timeout", "1s")},
		{"2 GB of output", "flood.sh", `# sandbox
# timeout: 60s
head -c 2000000000 /dev/zero | tr '\0' 'x' | fold -w 1000
echo
echo '"flooded"'`, wants(`"flooded"`)},
		{"fill /tmp", "filltmp.sh", `# sandbox
if dd if=/dev/zero of=/tmp/fill bs=1M count=1024 2>/dev/null; then echo '"FILLED 1G"'; else echo '"no space"'; fi`, wants(`"no space"`)},
		{"mount", "mount.sh", `# sandbox
if mount -t tmpfs none /tmp 2>/dev/null; then echo '"MOUNTED"'; else echo '"denied"'; fi`, wants(`"denied"`)},
		{"new user namespace", "userns.sh", `# sandbox
if unshare -U -r true 2>/dev/null; then echo '"UNSHARED"'; else echo '"denied"'; fi`, wants(`"denied"`)},
		{"ptrace", "ptrace.py", `# sandbox
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def main():
    pid = os.fork()
    if pid == 0:
        import time; time.sleep(5); os._exit(0)
    r = libc.ptrace(16, pid, None, None)  # PTRACE_ATTACH
    err = ctypes.get_errno()
    os.kill(pid, 9)
    return {"ptrace": r, "errno": err}`, wants(`"ptrace":-1`, `"errno":1`)},
		{"kernel keyring, bpf, perf, userfaultfd", "syscalls.py", `# sandbox
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
def main():
    out = {}
    for name, nr in [("keyctl", 250), ("bpf", 321), ("perf_event_open", 298), ("userfaultfd", 323), ("kexec_load", 246)]:
        r = libc.syscall(nr, 0, 0, 0, 0, 0)
        out[name] = "allowed" if r >= 0 else ctypes.get_errno()
    return out`, wants(`"keyctl":1`, `"bpf":1`, `"perf_event_open":1`, `"userfaultfd":1`, `"kexec_load":1`)},
		{"setuid binary", "setuid.sh", `# sandbox
euid=$(su -c 'id -u' root 2>/dev/null || echo refused)
nnp=$(grep NoNewPrivs /proc/self/status | awk '{print $2}')
caps=$(grep CapEff /proc/self/status | awk '{print $2}')
echo "{\"su\":\"$euid\",\"no_new_privs\":$nnp,\"cap_eff\":\"$caps\"}"`, wants(`"su":"refused"`, `"no_new_privs":1`, `"cap_eff":"0000000000000000"`)},
		{"processes left behind with setsid and nohup", "escape.sh", `# sandbox
setsid sleep 4242 >/dev/null 2>&1 &
nohup sleep 4343 >/dev/null 2>&1 &
echo '"left"'`, func(reply string, failed bool) string {
			if failed {
				return reply
			}
			// The reply comes at the job's end line, and the jail's teardown (which kills what
			// is left) right after it: the escapees must be gone within moments, not 4,242 s.
			if testwait.Poll(10*time.Second, testwait.Cond(func() bool {
				return !processRunning("sleep 4242") && !processRunning("sleep 4343")
			})) != nil {
				return "an escapee outlived its job's teardown by 10 s"
			}
			return ""
		}},
		{"kill everything it can see", "killall.sh", `# sandbox
kill -9 -1 2>/dev/null
echo '"done"'`, nil},
		{"see the host's processes", "ps.sh", `# sandbox
n=$(ls -d /proc/[0-9]* | wc -l)
echo "{\"pids\":$n,\"init\":\"$(tr '\0' ' ' < /proc/1/cmdline | cut -c1-20)\"}"`, func(reply string, failed bool) string {
			if failed || strings.Contains(reply, "systemd") || strings.Contains(reply, "/sbin/init") {
				return "sees the host: " + reply
			}
			var n int
			fmt.Sscanf(reply[strings.Index(reply, `"pids":`)+7:], "%d", &n)
			if n > 10 {
				return "sees more processes than its own: " + reply
			}
			return ""
		}},
		{"docker socket and devices", "devices.sh", `# sandbox
r=""
for f in /var/run/docker.sock /run/docker.sock /dev/sda /dev/vda /dev/mem /dev/kmsg; do [ -e "$f" ] && r="$r $f"; done
if echo x > /dev/evil 2>/dev/null; then r="$r wrote-dev"; fi
echo "\"found:$r\""`, wants(`"found:"`)},
		{"symlink in a volume to /etc/passwd", "symlink.sh", `# sandbox
# volume: trap trap
if [ -L trap/passwd ]; then
  echo "{\"second_run\":true,\"still_link\":true,\"target\":\"$(readlink trap/passwd)\"}"
  exit 0
fi
ln -s /etc/passwd trap/passwd
ln -s ../../../../etc trap/etc
echo '{"second_run":false}'`, nil},
		{"read other jobs and the host's code", "others.sh", `# sandbox
r=""
for d in /host/io/../../ /proc/1/root/etc/shadow; do
  if cat "$d" >/dev/null 2>&1; then r="$r $d"; fi
done
ls /host 2>/dev/null | tr '\n' ' ' > /tmp/l
echo "{\"read\":\"$r\",\"host_dir\":\"$(cat /tmp/l)\"}"`, wants(`"read":""`)},
	}
	files := map[string]string{"hello.py": helloPy}
	for _, a := range attacks {
		files[a.file] = a.script
	}
	// Every attack runs in a warm jail and in a cold one: a warm jail is built by the same code,
	// but waits before its job, which must not open a way out.
	// And forked from a template (--fork): every Python attack then runs in a fork, which the
	// job record must say.
	// And in a reused jail (reuse:): each attack is the first message of its jail, and hello
	// is served by one jail throughout.
	for _, mode := range []struct {
		name  string
		warm  int
		fork  bool
		reuse bool
	}{{"warm", 1, false, false}, {"cold", -1, false, false}, {"fork", 1, true, false}, {"reuse", -1, false, true}} {
		t.Run(mode.name, func(t *testing.T) {
			files := files
			if mode.reuse {
				files = reused(files)
			}
			h := hosttest.New(t, files, func(c *app.Config) { c.Warm, c.Fork = mode.warm, mode.fork })
			if mode.fork {
				waitTemplates(t, h, files)
			}
			passwdBefore, _ := os.ReadFile("/etc/passwd")
			for _, a := range attacks {
				t.Run(a.name, func(t *testing.T) {
					name := strings.TrimSuffix(a.file, a.file[strings.LastIndex(a.file, "."):])
					reply := h.Call(name, `{}`)
					if mode.fork {
						checkServed(t, h, reply, a.file, a.script)
					}
					if id := reply.Header.Get(bus.HeaderJobID); mode.reuse && id != "" && h.Record(id).Served != "reuse" {
						t.Fatalf("%s ran %q, not in a reused jail", a.file, h.Record(id).Served)
					}
					failed := reply.Header.Get(bus.HeaderJobStatus) != "succeeded"
					body := string(reply.Data)
					if failed {
						body = hosttest.Decode[jobs.ErrorEvent](t, reply.Data).Error
					}
					if a.check != nil {
						if problem := a.check(body, failed); problem != "" {
							t.Fatal(problem)
						}
					}
					// The host is unharmed: a normal call still works.
					if got := string(h.Call("hello", `{"name":"Ada"}`).Data); got != `{"greeting":"Hello, Ada!"}` {
						t.Fatalf("after the attack, hello returned %s", got)
					}
				})
			}

			if hits := metric(t, h, "host_warm_hits_total", "hello"); (hits > 0) != (mode.warm > 0 && !mode.fork) {
				t.Fatalf("%s: %v calls of hello ran warm", mode.name, hits)
			}

			t.Run("the volume symlink is stored as a link and never followed", func(t *testing.T) {
				second := hosttest.Decode[map[string]any](t, h.Call("symlink", `{}`).Data)
				if second["second_run"] != true || second["target"] != "/etc/passwd" {
					t.Fatalf("second run: %v", second)
				}
				if after, _ := os.ReadFile("/etc/passwd"); string(after) != string(passwdBefore) {
					t.Fatal("/etc/passwd changed")
				}
			})

			// The NATS probe above used the default port; make sure something there would have answered
			// had the jail let it through, or the check proves nothing. The test server's own port is
			// what matters: check it is reachable from the host, and probe it from the jail.
			t.Run("the test's own NATS is unreachable from the jail", func(t *testing.T) {
				addr := strings.TrimPrefix(h.Srv.ClientURL(), "nats://")
				if c, err := net.Dial("tcp", addr); err != nil {
					t.Fatalf("the host cannot reach its NATS at %s: %v", addr, err)
				} else {
					c.Close()
				}
				host, port, _ := net.SplitHostPort(addr)
				h.Write("natsprobe.py", fmt.Sprintf(`# sandbox
import socket
def main():
    try:
        socket.create_connection(("%s", %s), timeout=2).close()
        return "CONNECTED"
    except OSError:
        return "refused"
`, host, port))
				h.Eventually("the probe is served", func() bool {
					return !strings.Contains(string(h.Call("natsprobe", `{}`).Data), "no function named")
				})
				if got := string(h.Call("natsprobe", `{}`).Data); got != `"refused"` {
					t.Fatalf("jail reached the host's NATS: %s", got)
				}
			})
		})
	}
}

// reused gives every sandboxed function of files `reuse: 5`.
func reused(files map[string]string) map[string]string {
	out := map[string]string{}
	for name, src := range files {
		out[name] = strings.Replace(src, "# sandbox\n", "# sandbox\n# reuse: 5\n", 1)
	}
	return out
}

// waitTemplates waits until every sandboxed Python function of files has its template.
func waitTemplates(t *testing.T, h *hosttest.H, files map[string]string) {
	t.Helper()
	for file, src := range files {
		if !forkServed(file, src) {
			continue
		}
		name := strings.TrimSuffix(file, ".py")
		h.Eventually("the template of "+name+" serves", func() bool {
			return metric(t, h, "host_fork_templates_ready", name) == 1
		})
	}
}

// checkServed fails the test unless the job that sent reply ran as its file's runtime says
// it must with --fork: a sandboxed Python job as a fork, anything else not.
func checkServed(t *testing.T, h *hosttest.H, reply *nats.Msg, file, src string) {
	t.Helper()
	id := reply.Header.Get(bus.HeaderJobID)
	if id == "" {
		return // refused before it was a job
	}
	rec := h.Record(id)
	if want := forkServed(file, src); (rec.Served == "fork") != want {
		t.Fatalf("%s ran %q with --fork (python: %v)", file, rec.Served, want)
	}
}

// forkServed says whether --fork serves the function of file: a sandboxed Python script at the
// top of the functions directory, with jobs served ahead of demand.
func forkServed(file, src string) bool {
	return strings.HasSuffix(file, ".py") && !strings.Contains(file, "/") && strings.Contains(src, "# sandbox") && !strings.Contains(src, "# warm: 0")
}
