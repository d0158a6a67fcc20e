package system_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// noisyLines and the width of each make the noisy job's 17 MB: 200,000 lines of 84 digits and
// a newline, well past the default --max-output-bytes (10 MiB).
const noisyLines = 200_000

// TestNoisyJobDoesNotBreakOtherJobsLogs: a job printing 17 MB as fast as it can while three
// other jobs run. Each of those, followed as `invoke --wait` follows a job, shows every one of
// its lines in order, and the noisy job's log ends with the line saying it was cut, which its
// record says too.
func TestNoisyJobDoesNotBreakOtherJobsLogs(t *testing.T) {
	dir, err := os.MkdirTemp("", "noisy-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	release := filepath.Join(dir, "release")
	// Unjailed, so that the test can hold the noisy job between its two halves: it is alive,
	// and its first half is going through the log stream, while the quiet jobs run.
	noisy := fmt.Sprintf(`seq -f '%%084g' 1 %d
until [ -e %s ]; do sleep 0.01; done
seq -f '%%084g' %d %d
echo '"noisy done"'
`, noisyLines/2, release, noisyLines/2+1, noisyLines)
	const quietLines = 500
	quiet := fmt.Sprintf("# concurrency: 3\nfor i in $(seq 1 %d); do echo \"quiet $ARG_Q line $i\"; done\necho '\"quiet done\"'\n", quietLines)
	h := hosttest.New(t, map[string]string{"noisy.sh": noisy, "quiet.sh": quiet})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := client.New(ctx, h.NC)
	if err != nil {
		t.Fatal(err)
	}

	noisyID := ids.New()
	noisyStarted := make(chan struct{})
	type followed struct {
		rec *jobs.Record
		err error
	}
	noisyEnd := make(chan followed, 1)
	var noisyLog []string
	go func() {
		// Followed as invoke --wait follows it.
		var f followed
		f.rec, f.err = c.FollowJob(ctx, "noisy", noisyID, func(l client.LogLine) {
			if len(noisyLog) == 0 {
				close(noisyStarted)
			}
			noisyLog = append(noisyLog, l.Text)
		})
		noisyEnd <- f
	}()
	if err := c.Invoke(ctx, "noisy", noisyID, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-noisyStarted:
	case f := <-noisyEnd:
		t.Fatalf("the noisy job ended before its first line was seen: %+v %v", f.rec, f.err)
	}

	type quietEnd struct {
		id    string
		lines []string
		rec   *jobs.Record
		err   error
	}
	quietEnds := make(chan quietEnd, 3)
	for q := range 3 {
		id := fmt.Sprintf("quiet-%d-%s", q, ids.New())
		go func() {
			e := quietEnd{id: id}
			e.rec, e.err = c.FollowJob(ctx, "quiet", id, func(l client.LogLine) { e.lines = append(e.lines, l.Text) })
			quietEnds <- e
		}()
		if err := c.Invoke(ctx, "quiet", id, []byte(fmt.Sprintf(`{"q":%d}`, q))); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		e := <-quietEnds
		if e.err != nil {
			t.Fatalf("follow %s: %v", e.id, e.err)
		}
		if e.rec.Status != jobtype.Succeeded {
			t.Fatalf("quiet job %s: %+v", e.id, e.rec)
		}
		// Its lines, then its result, which a bash function prints last.
		if len(e.lines) != quietLines+1 || e.lines[quietLines] != `"quiet done"` {
			t.Fatalf("quiet job %s: %d lines shown, want %d and the result; the last: %q", e.id, len(e.lines), quietLines, e.lines[max(len(e.lines)-3, 0):])
		}
		for i, l := range e.lines[:quietLines] {
			if !strings.HasSuffix(l, fmt.Sprintf(" line %d", i+1)) {
				t.Fatalf("quiet job %s: line %d is %q: lines lost or out of order", e.id, i+1, l)
			}
		}
	}

	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f := <-noisyEnd
	if f.err != nil {
		t.Fatalf("follow the noisy job: %v", f.err)
	}
	rec := f.rec
	ended := time.Now()
	if rec.Status != jobtype.Succeeded {
		t.Fatalf("noisy job: %+v", rec)
	}
	if rec.LogTruncated == 0 || rec.LogTruncated >= noisyLines*85 {
		t.Fatalf("noisy job's record: log_truncated %d, want the bytes kept under the cap", rec.LogTruncated)
	}
	last := noisyLog[len(noisyLog)-1]
	if want := fmt.Sprintf("[host] output truncated after %d bytes; ", rec.LogTruncated); !strings.HasPrefix(last, want) {
		t.Fatalf("the noisy job's log ends with %q, want %q…", last, want)
	}
	for i, l := range noisyLog[:len(noisyLog)-1] {
		if want := fmt.Sprintf("%084d", i+1); l != want {
			t.Fatalf("noisy line %d is %q, want %q", i+1, l, want)
		}
	}

	// What `host logs <id>` reads after the job's end.
	start := time.Now()
	kept, err := c.Logs(ctx, noisyID)
	if err != nil {
		t.Fatal(err)
	}
	if len(kept) != len(noisyLog) || kept[len(kept)-1].Text != last {
		t.Fatalf("host logs read %d lines ending %q; the follower saw %d", len(kept), kept[len(kept)-1].Text, len(noisyLog))
	}
	t.Logf("noisy job: %d lines (%d bytes) logged before the cap; host logs read them all in %s, %s after the job's end was known",
		len(kept), rec.LogTruncated, time.Since(start).Round(time.Millisecond), time.Since(ended).Round(time.Millisecond))
	if n := h.Logs.FilterMessageSnippet("excessive stream ingest").Len(); n > 0 {
		t.Fatalf("the server dropped messages for excessive ingest %d times", n)
	}
}

// TestEgressRefusalInJobLog: a job the proxy refuses finds why in its own log, not only the
// host's, whatever its HTTP client makes of the refusal.
func TestEgressRefusalInJobLog(t *testing.T) {
	h := hosttest.New(t, map[string]string{
		"fetch.sh": "# sandbox\n# network: proxy api.example.com\ncurl -sS --max-time 10 https://elsewhere.example/ >/dev/null 2>&1\necho '\"tried\"'\n",
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.New(ctx, h.NC)
	if err != nil {
		t.Fatal(err)
	}
	id := ids.New()
	if err := c.Invoke(ctx, "fetch", id, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	var lines []string
	rec, err := c.FollowJob(ctx, "fetch", id, func(l client.LogLine) { lines = append(lines, l.Stream+": "+l.Text) })
	if err != nil {
		t.Fatal(err)
	}
	want := "stderr: [host] egress refused elsewhere.example:443: elsewhere.example is not in this function's allowlist (network: proxy api.example.com)"
	for _, l := range lines {
		if strings.HasPrefix(l, want) {
			return
		}
	}
	t.Fatalf("job %s (%s) logged %q, none starting %q", id, rec.Status, lines, want)
}

// TestLogIsWholeWhenTheCallerHearsTheEnd: two jobs print 17 MB each at once, capped at the
// default --max-output-bytes, while every core is kept busy. The moment each agent.call is
// answered, `host logs <job>` holds the job's every line, the truncation notice last. Several
// rounds in a row: the notice used to be missing right after the answer on a loaded machine
// (and there a moment later).
func TestLogIsWholeWhenTheCallerHearsTheEnd(t *testing.T) {
	noisy := fmt.Sprintf("seq -f '%%084g' 1 %d\necho '\"noisy done\"'\n", noisyLines)
	h := hosttest.New(t, map[string]string{"noisy.sh": "# concurrency: 2\n" + noisy})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := client.New(ctx, h.NC)
	if err != nil {
		t.Fatal(err)
	}
	// The machine busy: a spinning goroutine per core for the whole test.
	busy, stopBusy := context.WithCancel(ctx)
	defer stopBusy()
	for range runtime.NumCPU() {
		go func() {
			for busy.Err() == nil {
				for i := 0; i < 1e6; i++ {
				}
			}
		}()
	}
	for round := range 3 {
		type answered struct {
			id    string
			reply *nats.Msg
			err   error
		}
		ends := make(chan answered, 2)
		for n := range 2 {
			id := fmt.Sprintf("noisy-%d-%d-%s", round, n, ids.New())
			go func() {
				m := nats.NewMsg(bus.CallSubject("noisy"))
				m.Data = []byte("{}")
				m.Header.Set(bus.HeaderMsgID, id)
				reply, err := h.NC.RequestMsgWithContext(ctx, m)
				ends <- answered{id, reply, err}
			}()
		}
		for range 2 {
			e := <-ends
			if e.err != nil {
				t.Fatalf("round %d: call %s: %v", round, e.id, e.err)
			}
			// Read at once, as `host logs` right after `invoke --wait` returns.
			kept, err := c.Logs(ctx, e.id)
			if err != nil {
				t.Fatal(err)
			}
			rec := h.Record(e.id)
			if len(kept) == 0 || rec.LogTruncated == 0 {
				t.Fatalf("round %d: job %s: %d lines, record %+v", round, e.id, len(kept), rec)
			}
			last := kept[len(kept)-1].Text
			if want := fmt.Sprintf("[host] output truncated after %d bytes; ", rec.LogTruncated); !strings.HasPrefix(last, want) {
				t.Fatalf("round %d: job %s: right after the answer its log (%d lines, %d lost) ends %q, want the notice %q…",
					round, e.id, len(kept), rec.LogLost, last, want)
			}
			if rec.LogLastSeq != kept[len(kept)-1].Seq {
				t.Fatalf("round %d: job %s: the record names line %d as the last, the log's last is %d", round, e.id, rec.LogLastSeq, kept[len(kept)-1].Seq)
			}
		}
	}
}
