package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// logLines publishes n log lines of a job as the host does and returns the sequence of the last.
func logLines(t *testing.T, c *Client, id string, from, n int) uint64 {
	t.Helper()
	var seq uint64
	for i := from; i < from+n; i++ {
		m := nats.NewMsg(bus.LogsSubject("f", id))
		m.Header.Set(bus.HeaderStream, "stdout")
		m.Data = fmt.Appendf(nil, "line %d", i)
		ack, err := c.JS.PublishMsg(context.Background(), m)
		if err != nil {
			t.Fatal(err)
		}
		seq = ack.Sequence
	}
	return seq
}

func newLogClient(t *testing.T) (*Client, jetstream.Stream) {
	t.Helper()
	ctx := context.Background()
	nc, js := natstest.Start(t)
	logs, err := bus.EnsureLogStream(ctx, js, bus.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	store, err := jobs.Open(ctx, js, time.Hour, 1)
	if err != nil {
		t.Fatal(err)
	}
	return &Client{NC: nc, JS: js, Jobs: store}, logs
}

// TestFollowJobReadsUpToTheLastLine: FollowJob returns once it has handed over the line the
// final record names, however late that line arrives, and does not wait for a line the stream
// no longer has.
func TestFollowJobReadsUpToTheLastLine(t *testing.T) {
	c, logs := newLogClient(t)
	cases := []struct {
		name          string
		before, after int  // lines stored before the final record, and after it
		lastGone      bool // the last line was removed from the stream (its age or size limit)
		want          int
	}{
		{"every line stored before the record", 3, 0, false, 3},
		{"the last lines still on their way when the record is written", 1, 2, false, 3},
		{"a job that logged nothing", 0, 0, false, 0},
		{"the last line no longer in the stream", 3, 0, true, 2},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			id := fmt.Sprintf("job%02d", i)
			last := logLines(t, c, id, 1, tc.before)
			if tc.after > 0 {
				// Nothing else publishes on the stream: the lines to come take the next sequences.
				info, err := logs.Info(ctx)
				if err != nil {
					t.Fatal(err)
				}
				last = info.State.LastSeq + uint64(tc.after)
			}
			if tc.lastGone {
				if err := logs.DeleteMsg(ctx, last); err != nil {
					t.Fatal(err)
				}
			}
			// By the moves the store allows: running, then succeeded.
			rec := &jobs.Record{ID: id, Function: "f", Status: jobtype.Running, LogLastSeq: last}
			v, err := c.Jobs.Move(ctx, rec, jobs.Version{})
			if err == nil {
				rec.Status = jobtype.Succeeded
				_, err = c.Jobs.Move(ctx, rec, v)
			}
			if err != nil {
				t.Fatal(err)
			}
			type end struct {
				lines []string
				err   error
			}
			done := make(chan end, 1)
			go func() {
				var e end
				_, e.err = c.FollowJob(ctx, "f", id, func(l LogLine) { e.lines = append(e.lines, l.Text) })
				done <- e
			}()
			logLines(t, c, id, tc.before+1, tc.after)
			e := <-done
			if e.err != nil {
				t.Fatal(e.err)
			}
			var want []string
			for n := 1; n <= tc.want; n++ {
				want = append(want, fmt.Sprintf("line %d", n))
			}
			if strings.Join(e.lines, "|") != strings.Join(want, "|") {
				t.Fatalf("followed %q, want %q", e.lines, want)
			}
		})
	}
}

// TestLookupJob tells an unknown id from a job with a record, one with log lines only, and one
// whose trigger waits in the trigger stream.
func TestLookupJob(t *testing.T) {
	ctx := context.Background()
	c, _ := newLogClient(t)
	run, err := bus.EnsureRunStream(ctx, c.JS, nil, bus.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The function's consumer, as its host makes it: without one the stream keeps no trigger.
	if _, err := bus.EnsureConsumer(ctx, run, "f", []string{bus.RunSubject("f")}, time.Minute, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Jobs.Move(ctx, &jobs.Record{ID: "recorded", Function: "f", Status: jobtype.Running}, jobs.Version{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Jobs.Move(ctx, &jobs.Record{ID: "queuedrec", Function: "f", Status: jobtype.Queued}, jobs.Version{}); err != nil {
		t.Fatal(err)
	}
	logLines(t, c, "logged", 1, 1)
	m := nats.NewMsg(bus.RunSubject("f"))
	m.Header.Set(bus.HeaderMsgID, "waiting")
	m.Data = []byte(`{"n":1}`)
	if _, err := c.JS.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		id      string
		want    JobState
		trigger string // what Trigger returns; "" for an error matching ErrUnknownJob
	}{
		{"recorded", JobSeen, ""},
		{"queuedrec", JobQueued, ""},
		{"logged", JobSeen, ""},
		{"waiting", JobQueued, `{"n":1}`},
		{"nosuchjob", JobUnknown, ""},
	}
	for _, tc := range cases {
		if got, err := c.LookupJob(ctx, tc.id); err != nil || got != tc.want {
			t.Errorf("LookupJob(%s) = %v, %v; want %v", tc.id, got, err, tc.want)
		}
		data, err := c.Trigger(ctx, tc.id)
		if string(data) != tc.trigger || (tc.trigger == "") != errors.Is(err, ErrUnknownJob) {
			t.Errorf("Trigger(%s) = %q, %v; want %q", tc.id, data, err, tc.trigger)
		}
	}
}

// An id that could not be a job's never reaches a subject: "*" or ">" there would read every
// job's log.
func TestLogsRefuseIDsThatAreNotJobIDs(t *testing.T) {
	c, _ := newLogClient(t)
	logLines(t, c, "somejob", 1, 2)
	ctx := context.Background()
	for _, id := range []string{">", "*", "a.b", "", "two words"} {
		if lines, err := c.Logs(ctx, id); !errors.Is(err, ErrUnknownJob) {
			t.Errorf("Logs(%q) = %d lines, %v; want ErrUnknownJob", id, len(lines), err)
		}
		if _, err := c.FollowLogs(ctx, "", id, func(LogLine) { t.Errorf("FollowLogs(%q) delivered a line", id) }); !errors.Is(err, ErrUnknownJob) {
			t.Errorf("FollowLogs(%q): %v; want ErrUnknownJob", id, err)
		}
		if _, err := c.Trigger(ctx, id); !errors.Is(err, ErrUnknownJob) {
			t.Errorf("Trigger(%q): %v; want ErrUnknownJob", id, err)
		}
		if state, err := c.LookupJob(ctx, id); err != nil || state != JobUnknown {
			t.Errorf("LookupJob(%q) = %v, %v; want JobUnknown", id, state, err)
		}
	}
}
