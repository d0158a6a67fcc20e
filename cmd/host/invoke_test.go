package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// waitFunctions are the functions of the invoke and logs tests: unjailed, so that they run on
// any machine and the gate can wait for a file the test writes.
func waitFunctions(release string) map[string]string {
	return map[string]string{
		// Many lines, the last written right before it exits: no grace period after the job's end
		// would be enough to read them all.
		"lines.sh": "for i in $(seq 1 20000); do echo \"line $i\" >&2; done\necho '\"done\"'\necho 'the very last line' >&2\n",
		// 200 KB: over what a job record keeps of a result.
		"big.py":   "def main():\n    return 'x' * 200_000\n",
		"fails.sh": "echo oops >&2\nexit 3\n",
		// One at a time, so a second job waits queued behind the first.
		"gate.sh": fmt.Sprintf("# concurrency: 1\necho \"gate $ARG_N start\"\nuntil [ -e %s ]; do sleep 0.01; done\necho \"gate $ARG_N end\"\necho '\"gated\"'\n", release),
	}
}

// TestInvokeWaitAndLogsExitStatus: invoke --wait prints every line then the result, big ones
// too; exit status 0 succeeded, 1 failed, 2 could not run; logs of an unknown job is an error.
func TestInvokeWaitAndLogsExitStatus(t *testing.T) {
	e := newExposureEnv(t, waitFunctions(filepath.Join(os.TempDir(), "never")))
	natsAddr := freeAddr(t)
	startServe(t, e, nil, freeAddr(t), "--nats-listen", natsAddr)
	url := "nats://" + natsAddr
	// The job's stderr lines in order; its stdout line (the result) is read from another pipe,
	// so where it falls among them is not fixed.
	lines := func(stdout, stderr string) error {
		var got, want []string
		for _, l := range strings.Split(stderr, "\n") {
			if strings.HasPrefix(l, "[stderr] ") {
				got = append(got, l)
			}
		}
		for i := 1; i <= 20_000; i++ {
			want = append(want, fmt.Sprintf("[stderr] line %d", i))
		}
		want = append(want, "[stderr] the very last line")
		if strings.Join(got, "\n") != strings.Join(want, "\n") || !strings.Contains(stderr, "[stdout] \"done\"\n") {
			return fmt.Errorf("stderr does not show the job's lines in order:\n%s", stderr)
		}
		if strings.TrimSpace(stdout) != `"done"` {
			return fmt.Errorf("stdout %q, want the result", stdout)
		}
		return nil
	}
	cases := []struct {
		name  string
		args  []string
		code  int
		check func(stdout, stderr string) error
	}{
		{"every line before the result", []string{"--nats", url, "invoke", "lines", "--wait"}, 0, lines},
		{"a result too big for the record", []string{"--nats", url, "invoke", "big", "--wait"}, 0, func(stdout, _ string) error {
			if want := `"` + strings.Repeat("x", 200_000) + `"`; strings.TrimSpace(stdout) != want {
				return fmt.Errorf("stdout has %d bytes, want the %d of the result", len(stdout), len(want))
			}
			return nil
		}},
		{"a failed job", []string{"--nats", url, "invoke", "fails", "--wait"}, 1, wants("failed after 1 attempt(s)", "[stderr] oops")},
		{"no such function", []string{"--nats", url, "invoke", "nosuch", "--wait"}, 2, wants("no host serves this function")},
		{"a payload that is not JSON", []string{"--nats", url, "invoke", "lines", `{"a":`}, 2, wants("not valid JSON")},
		{"no function named", []string{"--nats", url, "invoke"}, 2, wants("accepts between 1 and 2 arg(s)")},
		{"no NATS", []string{"--nats", "nats://127.0.0.1:1", "invoke", "lines", "--wait"}, 2, wants("127.0.0.1:1")},
		{"logs of an unknown job", []string{"--nats", url, "logs", "nosuchjob"}, 1, wants("no such job nosuchjob")},
		{"logs -f of an unknown job", []string{"--nats", url, "logs", "-f", "nosuchjob"}, 1, wants("no such job nosuchjob")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stdout, stderr, code := run(t, c.args...)
			if code != c.code {
				t.Fatalf("exit status %d, want %d; stdout %q, stderr %q", code, c.code, truncated(stdout), truncated(stderr))
			}
			if err := c.check(stdout, stderr); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestLogsFollowQueuedJob: logs -f of a job queued behind another says it waits, prints the
// job's lines once it runs, and ends with the job.
func TestLogsFollowQueuedJob(t *testing.T) {
	dir := t.TempDir()
	release := filepath.Join(dir, "release")
	e := newExposureEnv(t, waitFunctions(release))
	natsAddr := freeAddr(t)
	startServe(t, e, nil, freeAddr(t), "--nats-listen", natsAddr)
	url := "nats://" + natsAddr
	var queued []string
	for n := range 2 {
		out, stderr, code := run(t, "--nats", url, "invoke", "gate", fmt.Sprintf(`{"n":%d}`, n))
		if code != 0 {
			t.Fatalf("invoke gate: %d %s", code, stderr)
		}
		queued = append(queued, strings.TrimSpace(out))
	}
	// Without -f: nothing to print yet, and it says why.
	if out, stderr, code := run(t, "--nats", url, "logs", queued[1]); code != 0 || out != "" || !strings.Contains(stderr, "is queued and has not started yet") {
		t.Fatalf("logs of a queued job: %d %q %q", code, out, stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	follow := exec.CommandContext(ctx, hostBin, "--nats", url, "logs", "-f", queued[1])
	follow.Env = e.env
	stdout, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := follow.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	said := bufio.NewReader(stderr)
	first, err := said.ReadString('\n')
	if err != nil || !strings.Contains(first, "job "+queued[1]+" is queued and has not started; waiting for it") {
		t.Fatalf("logs -f of a queued job first said %q (%v)", first, err)
	}
	// Only now may the gate open: the job was queued when logs -f looked.
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(stdout)
	rest, _ := io.ReadAll(said)
	if err := follow.Wait(); err != nil {
		t.Fatalf("logs -f: %v; stderr %s", err, rest)
	}
	if want := "gate 1 start\ngate 1 end\n\"gated\"\n"; string(out) != want {
		t.Fatalf("logs -f printed %q, want %q", out, want)
	}
	// A job that has ended: the same lines, and logs -f ends at once.
	out2, _, code := run(t, "--nats", url, "logs", "-f", queued[1])
	if code != 0 || out2 != string(out) {
		t.Fatalf("logs -f of an ended job: %d %q", code, out2)
	}
}

func wants(parts ...string) func(stdout, stderr string) error {
	return func(stdout, stderr string) error {
		for _, p := range parts {
			if !strings.Contains(stderr, p) {
				return fmt.Errorf("stderr lacks %q: %s", p, stderr)
			}
		}
		return nil
	}
}

func truncated(s string) string {
	if len(s) > 2000 {
		return s[:1000] + " … " + s[len(s)-1000:]
	}
	return s
}

// TestInvokeIDBindsItsArguments: `host invoke --id` names the job, an idempotency key. The same
// call again runs nothing twice and prints the first outcome; the same id with other arguments
// is refused, exit status 2, without the earlier result.
func TestInvokeIDBindsItsArguments(t *testing.T) {
	e := newExposureEnv(t, map[string]string{"pay.sh": "read -r args\necho \"{\\\"paid\\\":$args}\"\n"})
	natsAddr := freeAddr(t)
	startServe(t, e, nil, freeAddr(t), "--nats-listen", natsAddr)
	url := "nats://" + natsAddr
	stdout, stderr, code := run(t, "--nats", url, "invoke", "pay", `{"user":"alice"}`, "--id", "order-3003", "--wait")
	if code != 0 || strings.TrimSpace(stdout) != `{"paid":{"user":"alice"}}` {
		t.Fatalf("alice: exit %d, %q %q", code, stdout, stderr)
	}
	stdout, stderr, code = run(t, "--nats", url, "invoke", "pay", `{"user":"mallory"}`, "--id", "order-3003", "--wait")
	if code != 2 || strings.Contains(stdout+stderr, "alice") || !strings.Contains(stderr, `job id "order-3003" of function "pay" was already sent with other arguments`) {
		t.Fatalf("mallory under alice's id: exit %d, stdout %q, stderr %q; want 2, a refusal, nothing of alice's", code, stdout, stderr)
	}
	stdout, stderr, code = run(t, "--nats", url, "invoke", "pay", `{"user":"alice"}`, "--id", "order-3003", "--wait")
	if code != 0 || strings.TrimSpace(stdout) != `{"paid":{"user":"alice"}}` {
		t.Fatalf("alice's repeat: exit %d, %q %q", code, stdout, stderr)
	}
	if out, _, _ := run(t, "--nats", url, "jobs", "--function", "pay", "--json"); strings.Count(out, `"id": "order-3003"`) != 1 || strings.Count(out, `"function": "pay"`) != 1 {
		t.Fatalf("want one job of pay, order-3003:\n%s", out)
	}
}

// TestInvokeWaitSuperseded: invoke --wait on a debounce: message that a newer one supersedes
// says so and answers with the newer one's run.
func TestInvokeWaitSuperseded(t *testing.T) {
	e := newExposureEnv(t, map[string]string{"bounce.sh": "# debounce: 1s\ncat\n"})
	natsAddr := freeAddr(t)
	startServe(t, e, nil, freeAddr(t), "--nats-listen", natsAddr)
	url := "nats://" + natsAddr
	type answer struct {
		stdout, stderr string
		code           int
	}
	first := make(chan answer, 1)
	go func() {
		stdout, stderr, code := run(t, "--nats", url, "invoke", "bounce", `{"n":1}`, "--wait")
		first <- answer{stdout, stderr, code}
	}()
	time.Sleep(300 * time.Millisecond)
	out, stderr, code := run(t, "--nats", url, "invoke", "bounce", `{"n":2}`)
	if code != 0 {
		t.Fatalf("invoke bounce: %d %s", code, stderr)
	}
	second := strings.TrimSpace(out)
	select {
	case a := <-first:
		if a.code != 0 || strings.TrimSpace(a.stdout) != `{"n":2}` || !strings.Contains(a.stderr, "was superseded by job "+second+" (debounce::") {
			t.Fatalf("invoke --wait on the superseded message: exit %d, stdout %q, stderr %q; want 0, the newer run's result, and a line naming job %s", a.code, a.stdout, a.stderr, second)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("invoke --wait on the superseded message did not answer within 60 s")
	}
}
