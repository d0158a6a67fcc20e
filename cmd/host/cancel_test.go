package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/presence"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// `host jobs --status`, `host cancel` and `host functions` over records and announcements as
// hosts write them (no host serving: these commands read and change JetStream only).
func TestCancelJobsFunctionsCLI(t *testing.T) {
	url, nc, _ := cliNATS(t)
	ctx := context.Background()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := jobs.Bind(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, r := range []*jobs.Record{
		{ID: "q1", Function: "hello", Status: jobtype.Queued, Enqueued: now},
		{ID: "r1", Function: "hello", Status: jobtype.Running, Enqueued: now, Started: now, Host: "gone-host"},
		{ID: "s1", Function: "hello", Status: jobtype.Succeeded, Enqueued: now, Started: now, Finished: now},
		{ID: "f1", Function: "hello", Status: jobtype.Failed, Enqueued: now, Started: now, Finished: now},
		{ID: "s2", Function: "other", Status: jobtype.Succeeded, Enqueued: now, Started: now, Finished: now},
	} {
		hosttest.PutRecord(t, st, r)
	}
	board, err := presence.Open(ctx, js, time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	one, two := 1, 2 // warm jails: the two hosts keep different numbers; "other"'s host predates them
	for fn, a := range map[string]presence.Announcement{
		"hello": {Version: "v1", Host: "h1", Runtime: "python", Warm: &one},
		"other": {Version: "v9", Host: "h1", Runtime: "bash"},
	} {
		if err := board.Announce(ctx, fn, a); err != nil {
			t.Fatal(err)
		}
	}
	if err := board.Announce(ctx, "hello", presence.Announcement{Version: "v1", Host: "h2", Runtime: "python", Warm: &two}); err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"h1", "h2"} {
		if err := board.Alive(ctx, host); err != nil {
			t.Fatal(err)
		}
	}

	for _, c := range []struct {
		args     []string
		code     int
		has, not []string
	}{
		{[]string{"jobs", "--status", "queued"}, 0, []string{"q1"}, []string{"r1", "s1", "f1", "s2"}},
		{[]string{"jobs", "--status", "succeeded", "--function", "hello"}, 0, []string{"s1"}, []string{"s2", "q1"}},
		{[]string{"jobs", "--status", "done"}, 1, []string{`--status "done": want one of queued, running`}, nil},
		{[]string{"job", "q1"}, 0, []string{`"status": "queued"`}, nil},
		{[]string{"cancel", "s1"}, 1, []string{"job s1 has already finished (succeeded"}, nil},
		{[]string{"cancel", "nosuchjob"}, 1, []string{"no such job"}, nil},
		{[]string{"cancel", "q1"}, 0, []string{"job q1 canceled: it was waiting and will not run"}, nil},
		{[]string{"cancel", "q1"}, 1, []string{"job q1 has already finished (canceled"}, nil},
		{[]string{"jobs", "--status", "canceled"}, 0, []string{"q1"}, []string{"s1"}},
		// A running record no host answers for: its host is gone; the record is canceled.
		{[]string{"cancel", "r1"}, 0, []string{"job r1 canceled: its record said running on gone-host, which no longer answers"}, nil},
		{[]string{"functions"}, 0, []string{"NAME", "hello", "python", "50% of 2", "h1,h2", "other", "100% of 1"}, nil},
	} {
		out, errOut, code := run(t, append([]string{"--nats", url}, c.args...)...)
		all := out + errOut
		if code != c.code {
			t.Errorf("%v: exit %d, want %d: %q", c.args, code, c.code, all)
			continue
		}
		for _, s := range c.has {
			if !strings.Contains(all, s) {
				t.Errorf("%v: %q lacks %q", c.args, all, s)
			}
		}
		for _, s := range c.not {
			if strings.Contains(out, s) {
				t.Errorf("%v: %q has %q", c.args, out, s)
			}
		}
	}

	out, _, code := run(t, "--nats", url, "functions", "--json")
	var fns []struct {
		Name    string `json:"name"`
		Warm    string `json:"warm"`
		Queued  int    `json:"queued"`
		Running int    `json:"running"`
	}
	if err := json.Unmarshal([]byte(out), &fns); code != 0 || err != nil || len(fns) != 2 || fns[0].Name != "hello" || fns[0].Queued != 0 || fns[0].Running != 0 ||
		(fns[0].Warm != "1,2" && fns[0].Warm != "2,1") || fns[1].Warm != "" {
		t.Fatalf("functions --json: exit %d, %v: %s", code, err, out)
	}
	for _, id := range []string{"q1", "r1"} {
		if rec, err := st.Get(ctx, id); err != nil || rec.Status != jobtype.Canceled {
			t.Fatalf("%s after cancel: %+v, %v", id, rec, err)
		}
	}
}

// ctrl-C of `invoke --wait`: with --cancel-on-interrupt the job is canceled too; without it,
// and stdin not a terminal, the job goes on and the message says how to follow or stop it.
func TestInvokeWaitInterrupt(t *testing.T) {
	e := newExposureEnv(t, map[string]string{"hang.sh": "# concurrency: 2\necho started\nsleep 987656\n"})
	natsAddr := freeAddr(t)
	startServe(t, e, nil, freeAddr(t), "--nats-listen", natsAddr)
	url := "nats://" + natsAddr
	var left string
	for _, c := range []struct {
		flags  []string
		says   string
		status string
	}{
		{[]string{"--cancel-on-interrupt"}, "canceled: it was running on", `"status": "canceled"`},
		{nil, "goes on: follow it with `host logs -f", `"status": "running"`},
	} {
		cmd, stderr, id, said := invokeWaitStarted(t, url, c.flags...)
		cmd.Process.Signal(os.Interrupt)
		rest, _ := io.ReadAll(stderr)
		said += string(rest)
		err := cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code != 1 || id == "" || !strings.Contains(said, c.says) {
			t.Fatalf("%v: exit %d (%v), job %q, said %q; want %q", c.flags, code, err, id, said, c.says)
		}
		if out, errOut, code := run(t, "--nats", url, "job", id); code != 0 || !strings.Contains(out, c.status) {
			t.Fatalf("%v: job %s after the interrupt: %d %s %s; want %s", c.flags, id, code, out, errOut, c.status)
		}
		left = id
	}
	// The job left running is canceled with `host cancel`, which kills it on the host; so is
	// one that another `invoke --wait` waits for, which then says so and exits 1.
	cmd, stderr, id, _ := invokeWaitStarted(t, url)
	for _, job := range []string{left, id} {
		if out, errOut, code := run(t, "--nats", url, "cancel", job); code != 0 || !strings.Contains(out, "canceled: it was running on") {
			t.Fatalf("cancel %s: %d %s %s", job, code, out, errOut)
		}
	}
	said, _ := io.ReadAll(stderr)
	if cmd.Wait(); cmd.ProcessState.ExitCode() != 1 || !strings.Contains(string(said), "job "+id+" was canceled: the run was stopped before it finished: canceled by") {
		t.Fatalf("invoke --wait of a canceled job: exit %d, %s", cmd.ProcessState.ExitCode(), said)
	}
}

// invokeWaitStarted starts `host invoke hang --wait` and returns once the job has printed its
// first line, with the rest of its stderr, the job id and what it said so far.
func invokeWaitStarted(t *testing.T, url string, flags ...string) (*exec.Cmd, io.Reader, string, string) {
	t.Helper()
	cmd := exec.Command(hostBin, append([]string{"--nats", url, "invoke", "hang", "--wait"}, flags...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	lines := bufio.NewScanner(stderr)
	var id, said string
	for lines.Scan() {
		said += lines.Text() + "\n"
		if f := strings.Fields(lines.Text()); len(f) > 2 && f[0] == "job" && f[2] == "queued;" {
			id = f[1]
		}
		if lines.Text() == "[stdout] started" {
			break
		}
	}
	return cmd, stderr, id, said
}
