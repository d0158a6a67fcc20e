package host_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// limitStream sets a stream's largest message, as an operator's `nats stream edit
// --max-msg-size` does.
func limitStream(t *testing.T, h *hosttest.H, name string, maxMsg int32) {
	t.Helper()
	js, err := jetstream.New(h.NC)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxMsgSize = maxMsg
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
}

// TestEveryEndingAnswers is issue 22's second item, one case per way a job's end used to be
// lost: whatever happens to its record or its outputs, every caller (agent.call's reply,
// `host invoke --wait`, POST /run?wait) hears that the job failed and why, on the job's first
// and only attempt, and its final record says so. Before, these jobs stayed running for ever,
// or were run again and again, and their callers waited until they gave up.
func TestEveryEndingAnswers(t *testing.T) {
	big := func(n int) []byte { return []byte(`"` + strings.Repeat("r", n) + `"`) }
	cases := []struct {
		name string
		// fn is the function's source (its annotations); its runs return out.
		fn  string
		out *jobtype.Outcome
		// limit is the operator's change after the host started: a stream and its largest
		// message, or "" for none.
		stream string
		maxMsg int32
		// why is what the callers and the record must say.
		why string
	}{
		{"a result that is not JSON (the redactor once wrote {\"pin\":[REDACTED]})", "echo\n",
			&jobtype.Outcome{Result: []byte(`{"pin":[REDACTED]}`)}, "", 0, "the run's result is not valid JSON"},
		{"a result over the server's max_payload", "# retries: 3\necho\n",
			&jobtype.Outcome{Result: big(1536 << 10)}, "", 0, "over the server's max_payload"},
		{"a next: step the stream refuses", "# retries: 3\n# next: agent.run.sink\necho\n",
			&jobtype.Outcome{Result: big(4 << 10)}, bus.RunStream, 2 << 10, "message size exceeds maximum allowed"},
		{"a record the bucket refuses", "# retries: 3\necho\n",
			&jobtype.Outcome{Result: big(4 << 10)}, "KV_" + jobs.Bucket, 1536, "the job's record could not be written"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fake := newFake().on("fn", func(context.Context, *jobtype.Job) *jobtype.Outcome {
				out := *c.out
				return &out
			})
			h := hosttest.NewEngine(t, map[string]string{"fn.sh": c.fn, "sink.sh": "echo\n"}, fake)
			if c.stream != "" {
				limitStream(t, h, c.stream, c.maxMsg)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			check := func(how string, id string, rec *jobs.Record) {
				t.Helper()
				if rec.Status != jobtype.Failed || !strings.Contains(rec.Error, c.why) {
					t.Errorf("%s: record %s: %q, want failed with %q", how, rec.Status, rec.Error, c.why)
				}
				if got := fake.attempts(id); len(got) != 1 {
					t.Errorf("%s: the job ran %d times (%v)", how, len(got), got)
				}
			}

			// nats req agent.call.fn
			reply := h.Call("fn", `{}`)
			ev := hosttest.Decode[jobs.ErrorEvent](t, reply.Data)
			if reply.Header.Get(bus.HeaderJobStatus) != "failed" || !strings.Contains(ev.Error, c.why) {
				t.Fatalf("reply %s: %s, want the error %q", reply.Header.Get(bus.HeaderJobStatus), reply.Data, c.why)
			}
			id := reply.Header.Get(bus.HeaderJobID)
			check("agent.call", id, h.Record(id))

			// host invoke fn --wait
			cl, err := client.New(ctx, h.NC)
			if err != nil {
				t.Fatal(err)
			}
			id = ids.New()
			if err := cl.Invoke(ctx, "fn", id, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			rec, err := cl.FollowJob(ctx, "fn", id, func(client.LogLine) {})
			if err != nil {
				t.Fatalf("invoke --wait: %v", err)
			}
			check("invoke --wait", id, rec)

			// POST /run/fn?wait=60s
			web := httptest.NewServer(h.Web())
			defer web.Close()
			code, body, hdr := hosttest.Post(t, web.URL+"/run/fn?wait=60s", `{}`, nil)
			if code != 422 || !strings.Contains(body, c.why) {
				t.Fatalf("POST /run?wait: %d %s, want 422 with %q", code, body, c.why)
			}
			id = hdr.Get(bus.HeaderJobID)
			check("POST /run", id, h.Record(id))
			if n := fake.count("sink"); n != 0 {
				t.Errorf("the next step ran %d times", n)
			}
		})
	}
}

// TestNoRecordAtAllStillAnswersTheCaller: a bucket that refuses even the minimal record (here,
// its largest message made smaller than any record while the job ran). The caller of
// agent.call still hears, at once, that the job's record could not be written; the host says
// so in its log. (Readers of the record alone cannot learn the end then: it says running.)
func TestNoRecordAtAllStillAnswersTheCaller(t *testing.T) {
	release := make(chan struct{})
	fake := newFake().on("fn", func(ctx context.Context, _ *jobtype.Job) *jobtype.Outcome {
		<-release
		return &jobtype.Outcome{Result: []byte(`{"done":true}`)}
	})
	h := hosttest.NewEngine(t, map[string]string{"fn.sh": "echo\n"}, fake)
	replies := make(chan string, 1)
	go func() {
		reply := h.Call("fn", `{}`)
		replies <- reply.Header.Get(bus.HeaderJobStatus) + " " + string(reply.Data)
	}()
	h.Eventually("the job runs", func() bool { return fake.count("fn") == 1 })
	limitStream(t, h, "KV_"+jobs.Bucket, 64)
	close(release)
	got := <-replies
	if !strings.HasPrefix(got, "failed ") || !strings.Contains(got, "the job's record could not be written") {
		t.Fatalf("reply %s", got)
	}
	h.WaitLog("cannot write the job's record, nor a minimal one in its place; its record says what it said before the job ended", 0)
}
