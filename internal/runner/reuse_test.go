package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/runtimes"
)

// The same function in each runtime: it reports what it sees (its process, its module
// counter, what is in /job, /tmp, /dev/shm and the io directory, its environment, how many
// sleep processes its jail has), then leaves something of its own in each place, in its
// environment, and a process behind. mode makes it crash, exit or hang instead.
const reusePy = `import os, subprocess, sys, time
n = 0
PROC = int.from_bytes(os.urandom(6), "big")
def sleepers():
    n = 0
    for p in os.listdir("/proc"):
        try:
            n += p.isdigit() and open("/proc/" + p + "/comm").read() == "sleep\n"
        except OSError:
            pass
    return n
def main(mode=""):
    global n
    n += 1
    if mode == "crash":
        raise RuntimeError("boom")
    if mode == "exit":
        sys.exit(0)
    if mode == "hang":
        time.sleep(600)
    jid = os.environ["JOB_ID"]
    seen = {"proc": PROC, "n": n, "job": sorted(os.listdir("/job")), "tmp": sorted(os.listdir("/tmp")),
            "shm": sorted(os.listdir("/dev/shm")), "io": sorted(os.listdir("/host/io")), "leak": os.environ.get("LEAK", ""),
            "trace": os.environ.get("TRACEPARENT", ""), "job_id": jid, "procs": sleepers()}
    for d in ("/job", "/tmp", "/dev/shm", "/host/io"):
        with open(d + "/left-" + jid, "w") as f:
            f.write("x")
    os.environ["LEAK"] = jid
    subprocess.Popen(["sleep", "1000"])
    return seen
`

const reuseTS = `import { readdirSync, readFileSync, writeFileSync } from "node:fs";
let n = 0;
const PROC = Math.floor(Math.random() * 2 ** 48);
const ls = (d: string) => readdirSync(d).sort();
export async function main(mode: string = "") {
  n++;
  if (mode === "crash") throw new Error("boom");
  if (mode === "exit") process.exit(0);
  if (mode === "hang") await new Promise((r) => setTimeout(r, 600_000));
  const jid = process.env.JOB_ID!;
  const seen = { proc: PROC, n, job: ls("/job"), tmp: ls("/tmp"), shm: ls("/dev/shm"), io: ls("/host/io"),
    leak: process.env.LEAK ?? "", trace: process.env.TRACEPARENT ?? "", job_id: jid,
    procs: readdirSync("/proc").filter((p) => { try { return /^\d+$/.test(p) && readFileSync("/proc/" + p + "/comm", "utf8") === "sleep\n"; } catch { return false; } }).length };
  for (const d of ["/job", "/tmp", "/dev/shm", "/host/io"]) writeFileSync(d + "/left-" + jid, "x");
  process.env.LEAK = jid;
  Bun.spawn(["sleep", "1000"]);
  return seen;
}
`

// bash has no module state: the start time of $$ (the loop's shell, which every message's
// subshell shares; its pid is 2 in every jail) proves the reuse, and n is always 1.
const reuseSh = `read -r payload
case "$ARG_MODE" in
crash) exit 3 ;;
hang) sleep 600 ;;
esac
ls1() { ls -A "$1" | paste -sd, -; }
procs=$(cat /proc/[0-9]*/comm 2>/dev/null | grep -cx sleep)
read -r st < /proc/$$/stat
set -- ${st##*) }
printf '{"proc":%d,"n":1,"job":"%s","tmp":"%s","shm":"%s","io":"%s","leak":"%s","trace":"%s","job_id":"%s","procs":%d}\n' \
  "${20}" "$(ls1 /job)" "$(ls1 /tmp)" "$(ls1 /dev/shm)" "$(ls1 /host/io)" "${LEAK-}" "${TRACEPARENT-}" "$JOB_ID" "$procs"
for d in /job /tmp /dev/shm /host/io; do echo x > "$d/left-$JOB_ID"; done
export LEAK=$JOB_ID
sleep 1000 &
`

// seen is what the function reports.
type seen struct {
	// Proc names the process that served the message: a random number the module drew at
	// import (bash: its shell's start time).
	PID   int    `json:"proc"`
	N     int    `json:"n"`
	Leak  string `json:"leak"`
	Trace string `json:"trace"`
	JobID string `json:"job_id"`
	Procs int    `json:"procs"`
	// Lists in Python and Bun, comma-joined strings in bash.
	Job, Tmp, Shm, IO any
}

// empty reports whether a listing holds nothing a message left.
func empty(v any) bool {
	switch l := v.(type) {
	case nil:
		return true
	case string:
		return l == ""
	case []any:
		return len(l) == 0
	}
	return false
}

// reuseFunction writes the runtime's reporting function with reuse: n.
func reuseFunction(t *testing.T, root string, kind runtimes.Kind, n int) (*functions.Function, string) {
	t.Helper()
	src, ext := map[runtimes.Kind]string{runtimes.Python: reusePy, runtimes.Bun: reuseTS, runtimes.Bash: reuseSh}[kind], map[runtimes.Kind]string{runtimes.Python: ".py", runtimes.Bun: ".ts", runtimes.Bash: ".sh"}[kind]
	name := "reuse" + string(kind)
	code := filepath.Join(root, "code-"+name)
	if err := os.Mkdir(code, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(code, name+ext), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return &functions.Function{Name: name, Entry: name + ext, Runtime: kind, Hash: name,
		Spec: &annot.Spec{Sandbox: true, Reuse: n, Timeout: time.Minute, Network: annot.Network{Mode: annot.NetworkNone}}}, code
}

// call runs one message and decodes what the function saw; err is the run's error.
func call(t *testing.T, r *Runner, fn *functions.Function, code string, job *jobtype.Job) (seen, *jobtype.Outcome) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, _ := r.Run(ctx, fn, code, job)
	var s seen
	if out.Err == nil && string(out.Result) != "null" {
		if err := json.Unmarshal(out.Result, &s); err != nil {
			t.Fatalf("%s: result %s: %v", job.ID, out.Result, err)
		}
	}
	return s, out
}

func mustCall(t *testing.T, r *Runner, fn *functions.Function, code string, job *jobtype.Job) seen {
	t.Helper()
	s, out := call(t, r, fn, code, job)
	if out.Err != nil {
		t.Fatalf("%s: %v (stderr %s)", job.ID, out.Err, out.StderrTail)
	}
	if out.Served != ServedReuse {
		t.Fatalf("%s was served %q, want %q", job.ID, out.Served, ServedReuse)
	}
	return s
}

var reuseKinds = []runtimes.Kind{runtimes.Python, runtimes.Bun, runtimes.Bash}

func needRuntime(t *testing.T, kind runtimes.Kind) {
	t.Helper()
	bin := map[runtimes.Kind]string{runtimes.Python: "python3", runtimes.Bun: "bun", runtimes.Bash: "bash"}[kind]
	if _, err := exec.LookPath(bin); err != nil {
		t.Skipf("SKIPPED LOUDLY: %s is not installed: %v", bin, err)
	}
}

// TestReuseIsolation: two messages of one reused jail run in the same process (its module
// state carries over), and the second sees nothing of the first: no file in /job, /tmp,
// /dev/shm or the io directory, not its environment, not its trace, not its process.
func TestReuseIsolation(t *testing.T) {
	for _, kind := range reuseKinds {
		t.Run(string(kind), func(t *testing.T) {
			needRuntime(t, kind)
			r, dir := newJailRunner(t, WarmConfig{})
			fn, code := reuseFunction(t, dir, kind, 10)
			r.Warm(fn, code)
			first := mustCall(t, r, fn, code, &jobtype.Job{ID: "m1", Payload: []byte(`{}`), Trace: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
			second := mustCall(t, r, fn, code, &jobtype.Job{ID: "m2", Payload: []byte(`{}`)})
			if first.PID != second.PID || first.PID == 0 {
				t.Fatalf("pids %d and %d: the jail was not reused", first.PID, second.PID)
			}
			if kind != runtimes.Bash && second.N != 2 {
				t.Fatalf("the second message's counter is %d, want 2: module state does not carry over", second.N)
			}
			if first.Trace == "" || first.JobID != "m1" || second.JobID != "m2" {
				t.Fatalf("first %+v, second %+v: the messages' own environment is missing", first, second)
			}
			for _, s := range []seen{first, second} {
				if !empty(s.Job) || !empty(s.Tmp) || !empty(s.Shm) || !empty(s.IO) || s.Leak != "" {
					t.Fatalf("%s saw what an earlier message left: %+v", s.JobID, s)
				}
			}
			if second.Trace != "" {
				t.Fatalf("the second message sees the first's TRACEPARENT %q", second.Trace)
			}
			if first.Procs != 0 || second.Procs != 0 {
				t.Fatalf("the messages see %d and %d sleep processes: the first's was left running", first.Procs, second.Procs)
			}
		})
	}
}

// TestReuseEnds: a message that crashes, exits or times out ends its jail, and the n-th
// message too: the next message gets a new jail (a new process, a fresh counter).
func TestReuseEnds(t *testing.T) {
	for _, kind := range reuseKinds {
		t.Run(string(kind), func(t *testing.T) {
			needRuntime(t, kind)
			r, dir := newJailRunner(t, WarmConfig{})
			fn, code := reuseFunction(t, dir, kind, 3)
			fn.Spec.Timeout = 3 * time.Second
			r.Warm(fn, code)
			id := 0
			next := func(mode string) (seen, *jobtype.Outcome) {
				id++
				return call(t, r, fn, code, &jobtype.Job{ID: fmt.Sprintf("m%d", id), Payload: fmt.Appendf(nil, `{"mode":%q}`, mode)})
			}
			a, _ := next("")
			b, _ := next("")
			c, _ := next("")
			d, _ := next("")
			if a.PID != b.PID || b.PID != c.PID || c.PID == d.PID {
				t.Fatalf("reuse: 3 served pids %d %d %d %d: want 3 messages in one jail, then a new one", a.PID, b.PID, c.PID, d.PID)
			}
			modes := []string{"crash", "hang"}
			if kind != runtimes.Bash {
				modes = append(modes, "exit")
			}
			for _, mode := range modes {
				before, _ := next("")
				_, out := next(mode)
				if mode != "exit" && out.Err == nil {
					t.Fatalf("%s: the message succeeded", mode)
				}
				if mode == "hang" && !strings.Contains(out.Err.Error(), "timeout") {
					t.Fatalf("hang: %v, want a timeout", out.Err)
				}
				after, _ := next("")
				if after.PID == before.PID || after.PID == 0 || (kind != runtimes.Bash && after.N != 1) {
					t.Fatalf("after a message that did %s: pid %d (before %d), counter %d: the jail was not replaced", mode, after.PID, before.PID, after.N)
				}
			}
		})
	}
}

// TestReuseLoad: one reused Python jail and one Bun jail serve many messages (REUSE_LOAD, 1,000
// by default; 10,000 for the report) with no process left behind and no growing memory: the
// jail's processes and their RSS are read before and after, from the host.
func TestReuseLoad(t *testing.T) {
	n := 1000
	if s := os.Getenv("REUSE_LOAD"); s != "" {
		fmt.Sscanf(s, "%d", &n)
	}
	for _, kind := range []runtimes.Kind{runtimes.Python, runtimes.Bun} {
		t.Run(string(kind), func(t *testing.T) {
			needRuntime(t, kind)
			r, dir := newJailRunner(t, WarmConfig{})
			fn, code := reuseFunction(t, dir, kind, annot.MaxReuse)
			src := map[runtimes.Kind]string{runtimes.Python: "import os\nPROC = os.urandom(6).hex()\ndef main(i=0):\n    return {'i': i, 'proc': PROC}\n",
				runtimes.Bun: "const PROC = String(Math.random());\nexport function main(i: number = 0) { return { i, proc: PROC }; }\n"}[kind]
			if err := os.WriteFile(filepath.Join(code, fn.Entry), []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			r.Warm(fn, code)
			var proc string
			run := func(i int) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				out, _ := r.Run(ctx, fn, code, &jobtype.Job{ID: fmt.Sprintf("m%d", i), Payload: fmt.Appendf(nil, `{"i":%d}`, i)})
				if out.Err != nil {
					t.Fatalf("message %d: %v (stderr %s)", i, out.Err, out.StderrTail)
				}
				var got struct {
					I    int    `json:"i"`
					Proc string `json:"proc"`
				}
				if err := json.Unmarshal(out.Result, &got); err != nil || got.I != i {
					t.Fatalf("message %d: result %s (%v)", i, out.Result, err)
				}
				if proc == "" {
					proc = got.Proc
				}
				if got.Proc != proc {
					t.Fatalf("message %d ran in another jail: the reused one ended", i)
				}
			}
			const warmup = 50
			for i := range warmup {
				run(i)
			}
			procsBefore, rssBefore := jailProcs(t, dir)
			t0 := time.Now()
			for i := warmup; i < n-1; i++ {
				run(i)
			}
			took := time.Since(t0)
			procsAfter, rssAfter := jailProcs(t, dir)
			t.Logf("%s: %d messages in one jail; messages %d..%d took %v (%.0f/s); the jail's processes: %d before, %d after; their RSS: %d KiB before, %d KiB after (%+d KiB)",
				kind, n-1, warmup, n-2, took.Round(time.Millisecond), float64(n-1-warmup)/took.Seconds(), len(procsBefore), len(procsAfter), rssBefore, rssAfter, rssAfter-rssBefore)
			if len(procsBefore) == 0 {
				t.Fatal("found none of the jail's processes")
			}
			if len(procsAfter) != len(procsBefore) {
				t.Fatalf("the jail had %d processes after the warm-up and %d at the end: %v, then %v", len(procsBefore), len(procsAfter), procsBefore, procsAfter)
			}
			// Not a timing: a bound on what a leak of a few hundred bytes a message would pass.
			if grew := rssAfter - rssBefore; grew > 16<<10 {
				t.Fatalf("the jail's RSS grew by %d KiB over %d messages", grew, n-1-warmup)
			}
		})
	}
}

// jailProcs lists the processes of this test's reused jails (the jail tool's, whose arguments
// name the test's directory, and the runtime's, started with --reuse-late) and the sum of their
// resident memory, in KiB.
func jailProcs(t *testing.T, dir string) (pids []int, rssKiB int) {
	t.Helper()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !(strings.Contains(string(cmd), dir) || strings.Contains(string(cmd), "--reuse-late")) {
			continue
		}
		pids = append(pids, pid)
		b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		for _, line := range strings.Split(string(b), "\n") {
			var kb int
			if _, err := fmt.Sscanf(line, "VmRSS: %d kB", &kb); err == nil {
				rssKiB += kb
			}
		}
	}
	slices.Sort(pids)
	return pids, rssKiB
}

// TestKeptStream: a kept jail's stream passes a message its output up to its end line however
// the writes cut it, drops what comes after, and hears the ready line that follows.
func TestKeptStream(t *testing.T) {
	out := "line one\nlong " + strings.Repeat("x", 200) + "\nlast"
	all := out + runtimes.EndMarker + "0\nafter the end\n" + runtimes.ReadyMarker + "\nbetween messages\n"
	for _, size := range []int{1, 3, 7, 64, 1000} {
		var s keptStream
		var got strings.Builder
		run := &keptRun{ended: make(chan int, 1), readyNext: make(chan struct{})}
		s.attach(&got, run, true)
		run.seen = 1 // the other stream's end line went by
		for b := []byte(all); len(b) > 0; b = b[min(size, len(b)):] {
			s.Write(b[:min(size, len(b))])
		}
		if want := out + runtimes.EndMarker + "0\n"; got.String() != want {
			t.Fatalf("writes of %d: the message got %q, want %q", size, got.String(), want)
		}
		select {
		case code := <-run.ended:
			if code != 0 {
				t.Fatalf("writes of %d: code %d", size, code)
			}
		default:
			t.Fatalf("writes of %d: the end was not heard", size)
		}
		select {
		case <-run.readyNext:
		default:
			t.Fatalf("writes of %d: the ready line was not heard", size)
		}
	}
}

// TestReuseVersions: a new version of the function gets a jail of its own and the old
// version's idle jail is torn down; Cool leaves none, nor their directories.
func TestReuseVersions(t *testing.T) {
	needRuntime(t, runtimes.Python)
	r, dir := newJailRunner(t, WarmConfig{})
	v1, code1 := reuseFunction(t, dir, runtimes.Python, 10)
	r.Warm(v1, code1)
	a := mustCall(t, r, v1, code1, &jobtype.Job{ID: "m1", Payload: []byte(`{}`)})
	if b := mustCall(t, r, v1, code1, &jobtype.Job{ID: "m2", Payload: []byte(`{}`)}); b.PID != a.PID {
		t.Fatal("the second message of v1 got another jail")
	}
	code2 := filepath.Join(dir, "code-v2")
	if err := os.CopyFS(code2, os.DirFS(code1)); err != nil {
		t.Fatal(err)
	}
	v2 := *v1
	v2.Hash = "v2"
	r.Warm(&v2, code2)
	c := mustCall(t, r, &v2, code2, &jobtype.Job{ID: "m3", Payload: []byte(`{}`)})
	if c.PID == a.PID || c.N != 1 {
		t.Fatalf("v2's message ran in v1's jail (counter %d)", c.N)
	}
	waitIdle := func(want int) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for len(r.reuse.idleJails(v1.Name)) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%d idle jails of %s, want %d", len(r.reuse.idleJails(v1.Name)), v1.Name, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitIdle(1) // v2's; v1's was torn down
	r.Cool(v1.Name)
	waitIdle(0)
	r.reuse.wg.Wait()
	if left, _ := filepath.Glob(filepath.Join(dir, "run", "reuse-*")); len(left) != 0 {
		t.Fatalf("after Cool: %v", left)
	}
}

// TestReuseConcurrent: messages that run at once get a kept jail each; later messages reuse
// those jails, so the function never has more jails than messages it ran at once.
func TestReuseConcurrent(t *testing.T) {
	needRuntime(t, runtimes.Python)
	r, dir := newJailRunner(t, WarmConfig{})
	fn, code := reuseFunction(t, dir, runtimes.Python, 100)
	r.Warm(fn, code)
	const at = 4
	var outs []*jobtype.Outcome
	var mu sync.Mutex
	var wg sync.WaitGroup
	for round := range 3 {
		for i := range at {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, _ := r.Run(context.Background(), fn, code, &jobtype.Job{ID: fmt.Sprintf("r%d-%d", round, i), Payload: []byte(`{}`)})
				mu.Lock()
				outs = append(outs, out)
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	jails := map[int]int{}
	for _, out := range outs {
		var s seen
		if out.Err != nil || out.Served != ServedReuse || json.Unmarshal(out.Result, &s) != nil {
			t.Fatalf("%v (served %q, result %s, stderr %s)", out.Err, out.Served, out.Result, out.StderrTail)
		}
		jails[s.PID]++
	}
	if len(jails) > at {
		t.Fatalf("%d messages, %d at a time, ran in %d jails: a kept jail was not reused", 3*at, at, len(jails))
	}
	if idle := len(r.reuse.idleJails(fn.Name)); idle > at {
		t.Fatalf("%d idle jails, more than the %d messages that ran at once", idle, at)
	}
}
