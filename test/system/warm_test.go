package system_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// metric sums the series of a metric family whose function label is fn.
func metric(t *testing.T, h *hosttest.H, name, fn string) float64 {
	t.Helper()
	fams, err := h.Metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "function" && l.GetValue() == fn {
					sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	return sum
}

// waitWarm waits until fn has n warm jails waiting.
func waitWarm(t *testing.T, h *hosttest.H, fn string, n int) {
	t.Helper()
	h.Eventually(fmt.Sprintf("%d warm jails of %s waiting", n, fn), func() bool {
		return metric(t, h, "host_warm_jails_waiting", fn) == float64(n)
	})
}

// callWarm calls fn once a warm jail waits for it, and checks that the job was handed to it.
func callWarm(t *testing.T, h *hosttest.H, fn, payload string) []byte {
	t.Helper()
	waitWarm(t, h, fn, 1)
	hits := metric(t, h, "host_warm_hits_total", fn)
	data := h.Call(fn, payload).Data
	if got := metric(t, h, "host_warm_hits_total", fn); got != hits+1 {
		t.Fatalf("warm hits of %s went from %v to %v: the job did not run warm (reply %s)", fn, hits, got, data)
	}
	return data
}

// TestWarmJobsAreIsolated: each warm jail serves one job; the next job of the function, in the
// next warm jail, sees nothing the previous one left: files in /tmp and /job, an exported
// variable, a background process.
func TestWarmJobsAreIsolated(t *testing.T) {
	marker := fmt.Sprintf("sleep 400.%d", time.Now().UnixNano()%1_000_000)
	script := `# sandbox
# warm: 1
seen=""
[ -e /tmp/left ] && seen="$seen tmp"
[ -e /job/left ] && seen="$seen job"
[ -n "$LEFT" ] && seen="$seen env"
for c in /proc/[0-9]*/cmdline; do
	if tr '\0' ' ' < "$c" 2>/dev/null | grep -q "^` + marker + `"; then seen="$seen process"; fi
done
touch /tmp/left /job/left
export LEFT=1
setsid ` + marker + ` >/dev/null 2>&1 &
printf '{"seen":"%s","job":"%s"}\n' "$seen" "$JOB_ID"
`
	for _, name := range []string{"isolated.sh", "isolatedpy/main.py"} {
		files := map[string]string{"isolated.sh": script}
		fn := "isolated"
		if strings.HasSuffix(name, ".py") {
			fn = "isolatedpy"
			files = map[string]string{name: `# sandbox
import os, subprocess

def main():
    seen = [what for what, gone in (("tmp", not os.path.exists("/tmp/left")), ("job", not os.path.exists("/job/left")),
                                      ("env", "LEFT" not in os.environ)) if not gone]
    for c in os.listdir("/proc"):
        try:
            with open(f"/proc/{c}/cmdline", "rb") as f:
                if f.read().replace(b"\0", b" ").startswith(b"` + marker + `"):
                    seen.append("process")
        except (OSError, ValueError):
            pass
    open("/tmp/left", "w").close()
    open("/job/left", "w").close()
    os.environ["LEFT"] = "1"
    subprocess.Popen("` + marker + `".split(), start_new_session=True)
    return {"seen": " ".join(seen), "job": os.environ["JOB_ID"]}
`}
		}
		t.Run(fn, func(t *testing.T) {
			h := hosttest.New(t, files)
			var jobsSeen []string
			for range 3 {
				res := hosttest.Decode[map[string]string](t, callWarm(t, h, fn, "{}"))
				if strings.TrimSpace(res["seen"]) != "" {
					t.Fatalf("a warm job saw what an earlier one left: %q", res["seen"])
				}
				jobsSeen = append(jobsSeen, res["job"])
			}
			if jobsSeen[0] == jobsSeen[1] || jobsSeen[1] == jobsSeen[2] || jobsSeen[0] == "" {
				t.Fatalf("jobs saw JOB_IDs %q: the hand-over should set each job's own", jobsSeen)
			}
			h.Eventually("no "+marker+" left on the host", func() bool { return !processRunning(marker) })
		})
	}
}

// TestWarmJailHoldsNoSecret: until its job is handed over, a warm jail holds no secret: not in
// any process's environment or command line, not in any file of its directory. The job then
// gets it.
func TestWarmJailHoldsNoSecret(t *testing.T) {
	secret := fmt.Sprintf("warm-secret-%d", time.Now().UnixNano())
	for _, c := range []struct{ fn, file, src string }{
		{"secretsh", "secretsh.sh", "# sandbox\n# env: TOKEN=$secret:tok\nprintf '\"%s\"\\n' \"$(printf %s \"$TOKEN\" | sha256sum | cut -c1-64)\"\n"},
		{"secretpy", "secretpy.py", "# sandbox\n# env: TOKEN=$secret:tok\nimport hashlib, os\nAT_IMPORT = os.environ.get('TOKEN')\n" +
			"def main():\n    return hashlib.sha256(os.environ['TOKEN'].encode()).hexdigest() if AT_IMPORT == os.environ['TOKEN'] else 'top-level code did not see the secret'\n"},
	} {
		t.Run(c.fn, func(t *testing.T) {
			h := hosttest.New(t, map[string]string{c.file: c.src})
			h.SetSecret("tok", `"`+secret+`"`)
			waitWarm(t, h, c.fn, 1)
			procs, _ := filepath.Glob("/proc/[0-9]*")
			for _, p := range procs {
				for _, f := range []string{"environ", "cmdline"} {
					if b, err := os.ReadFile(filepath.Join(p, f)); err == nil && strings.Contains(string(b), secret) {
						t.Fatalf("%s/%s holds the secret before any job was handed over", p, f)
					}
				}
			}
			filepath.Walk(filepath.Join(h.Dir, "data", "run"), func(path string, info os.FileInfo, err error) error {
				if err == nil && info.Mode().IsRegular() {
					if b, err := os.ReadFile(path); err == nil && strings.Contains(string(b), secret) {
						t.Errorf("%s holds the secret before any job was handed over", path)
					}
				}
				return nil
			})
			sum := sha256.Sum256([]byte(secret))
			if got, want := string(callWarm(t, h, c.fn, "{}")), `"`+hex.EncodeToString(sum[:])+`"`; got != want {
				t.Fatalf("the job got %s, want the secret's hash %s", got, want)
			}
		})
	}
}

// TestWarmLimitsHold: a warm jail has its function's limits; its timeout counts from the
// hand-over, not from when the jail started; a job killed at a limit leaves its replacement
// healthy.
func TestWarmLimitsHold(t *testing.T) {
	h := hosttest.New(t, map[string]string{
		"hog.py":   "# sandbox\n# memory: 64Mi\ndef main(mb: int = 0):\n    b = bytearray(mb << 20)\n    for i in range(0, len(b), 4096):\n        b[i] = 1\n    return len(b) >> 20\n",
		"forks.sh": "# sandbox\nread -r payload\nn=${payload//[^0-9]/}\nfor i in $(seq 1 \"$n\"); do sleep 30 & done\necho '\"forked\"'\n",
		"nap.sh":   "# sandbox\n# timeout: 1s\nread -r payload\nsleep \"${payload//[^0-9.]/}\"\necho '\"woke\"'\n",
	}, func(c *app.Config) { c.Limits.Pids = 40 })

	check := func(fn, payload, want string) {
		t.Helper()
		data := string(callWarm(t, h, fn, payload))
		if !strings.Contains(data, want) {
			t.Fatalf("%s %s = %s, want %s", fn, payload, data, want)
		}
	}
	check("hog", `{"mb": 200}`, "memory")
	check("hog", `{"mb": 1}`, "1")
	check("forks", `{"n": 100}`, "pids")
	check("forks", `{"n": 1}`, `"forked"`)
	// The jail has waited longer than the timeout before its job: the job still has all of it.
	waitWarm(t, h, "nap", 1)
	time.Sleep(1500 * time.Millisecond)
	check("nap", `{"s": 0.1}`, `"woke"`)
	check("nap", `{"s": 5}`, "timeout")
	check("nap", `{"s": 0}`, `"woke"`)
}

// TestWarmJailDiedWaiting: a warm jail that dies while waiting is never handed a job; the job
// runs cold (a miss) and succeeds, and the runner stops restarting a function whose jails keep
// dying until its jobs ask again.
func TestWarmJailDiedWaiting(t *testing.T) {
	h := hosttest.New(t, map[string]string{
		// Its top-level code kills its own runtime unless a job is there: every warm jail dies
		// waiting, and a cold run works.
		"fragile.py": "# sandbox\nimport os, signal\nif 'JOB_ID' not in os.environ:\n    os.kill(os.getpid(), signal.SIGKILL)\n" +
			"def main():\n    return os.environ['JOB_ID']\n",
	})
	h.Eventually("warm jails of fragile died", func() bool { return metric(t, h, "host_warm_died_total", "fragile") >= 3 })
	reply := h.Call("fragile", "{}")
	id := hosttest.Decode[string](t, reply.Data)
	if rec := h.Record(id); rec == nil || rec.Status != jobtype.Succeeded {
		t.Fatalf("record of %s: %+v", id, rec)
	}
	if metric(t, h, "host_warm_misses_total", "fragile") < 1 || metric(t, h, "host_warm_hits_total", "fragile") != 0 {
		t.Fatalf("misses %v, hits %v", metric(t, h, "host_warm_misses_total", "fragile"), metric(t, h, "host_warm_hits_total", "fragile"))
	}
}

// TestWarmReloadReplacesJails: a new version's jails replace the old one's, so the next job runs
// the new code, warm; a removed function's jails go.
func TestWarmReloadReplacesJails(t *testing.T) {
	h := hosttest.New(t, map[string]string{"ver.py": "# sandbox\nV = 'one'\ndef main():\n    return V\n"})
	if got := string(callWarm(t, h, "ver", "{}")); got != `"one"` {
		t.Fatalf("v1 = %s", got)
	}
	h.Write("ver.py", "# sandbox\nV = 'two'\ndef main():\n    return V\n")
	h.Eventually("the new version answers", func() bool { return string(h.Call("ver", "{}").Data) == `"two"` })
	if got := string(callWarm(t, h, "ver", "{}")); got != `"two"` {
		t.Fatalf("a warm job after the reload ran %s, want the new code", got)
	}
	if err := os.Remove(filepath.Join(h.FnDir, "ver.py")); err != nil {
		t.Fatal(err)
	}
	waitWarm(t, h, "ver", 0)
	h.Eventually("no warm jail directory left", func() bool {
		left, _ := filepath.Glob(filepath.Join(h.Dir, "data", "run", "warm-ver-*"))
		return len(left) == 0
	})
}

// TestWarmChainStaysWarm: in a flow, each step's function has a jail waiting, so every step of
// a chain is handed over rather than started, run after run.
func TestWarmChainStaysWarm(t *testing.T) {
	step := func(next string) string {
		s := "# sandbox\n"
		if next != "" {
			s += "# next: agent.run." + next + "\n"
		}
		return s + "def main(i: int = 0):\n    return {'i': i + 1}\n"
	}
	h := hosttest.New(t, map[string]string{"chain1.py": step("chain2"), "chain2.py": step("chain3"), "chain3.py": step("")})
	last := h.Sub("agent.result.chain3")
	for run := 1; run <= 2; run++ {
		for _, fn := range []string{"chain1", "chain2", "chain3"} {
			waitWarm(t, h, fn, 1)
		}
		h.Publish("agent.run.chain1", `{"i": 0}`, nil)
		if got := string(h.Next(last).Data); got != `{"i":3}` {
			t.Fatalf("run %d: chain3 returned %s", run, got)
		}
		for _, fn := range []string{"chain1", "chain2", "chain3"} {
			if hits := metric(t, h, "host_warm_hits_total", fn); hits != float64(run) {
				t.Fatalf("run %d: %s ran warm %v times", run, fn, hits)
			}
		}
	}
}

// TestWarmShutdownTearsDown: a host that stops (SIGTERM's drain) leaves no warm jail: no process,
// no directory.
func TestWarmShutdownTearsDown(t *testing.T) {
	name := fmt.Sprintf("stopprobe%d", time.Now().UnixNano()%1_000_000)
	h := hosttest.New(t, map[string]string{name + ".py": "# sandbox\n# warm: 2\ndef main():\n    return 1\n"})
	waitWarm(t, h, name, 2)
	marker := "/host/fn/" + name + ".py"
	h.Eventually("the warm jails' runtimes are up", func() bool { return len(processesWith(marker)) > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h.Host.Shutdown(ctx)
	if left := processesWith(marker); len(left) > 0 {
		t.Fatalf("processes of warm jails left after the shutdown: %v", left)
	}
	if left, _ := filepath.Glob(filepath.Join(h.Dir, "data", "run", "warm-*")); len(left) > 0 {
		t.Fatalf("warm jail directories left after the shutdown: %v", left)
	}
}

// processesWith returns the pids whose command line contains s.
func processesWith(s string) []string {
	var pids []string
	entries, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, e := range entries {
		if b, err := os.ReadFile(e); err == nil && strings.Contains(string(b), s) {
			pids = append(pids, filepath.Base(filepath.Dir(e)))
		}
	}
	return pids
}
