package host_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// joinFlow: start maps its files onto file and sends its result to summary; both lead to
// report, which joins them. fileRun is file's behaviour.
func joinFlow(t *testing.T, extra string, fileRun func(ctx context.Context, j *jobtype.Job) *jobtype.Outcome) (*hosttest.H, *fakeRunner, func() []string) {
	var mu sync.Mutex
	var reports []string
	fake := newFake().
		on("start", result(`{"files":["a","b","c"]}`)).
		on("summary", result(`{"words":3}`)).
		on("file", fileRun).
		on("report", func(_ context.Context, j *jobtype.Job) *jobtype.Outcome {
			mu.Lock()
			reports = append(reports, string(j.Payload))
			mu.Unlock()
			return &jobtype.Outcome{Result: []byte(`"reported"`)}
		})
	h := hosttest.NewEngine(t, map[string]string{
		"start.sh":   "# next: agent.run.summary\n# next: agent.run.file each result.files\necho\n",
		"summary.sh": "# next: agent.run.report\necho\n",
		"file.sh":    "# next: agent.run.report\necho\n",
		"report.sh":  "# join: summary file\n" + extra + "echo\n",
	}, fake)
	return h, fake, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), reports...)
	}
}

func fileResult(_ context.Context, j *jobtype.Job) *jobtype.Outcome {
	var in struct{ Item string }
	_ = json.Unmarshal(j.Payload, &in)
	return &jobtype.Outcome{Result: []byte(`{"f":"` + in.Item + `"}`)}
}

// A join runs once per flow, when every awaited step has delivered (each item of a map),
// with their results by name, a map's in item order, even with two hosts gathering.
func TestEngineJoin(t *testing.T) {
	h, fake, reports := joinFlow(t, "", fileResult)
	h.AddEngineHost(t, fake)
	h.Publish(bus.RunSubject("start"), `{}`, map[string]string{bus.HeaderMsgID: "start-1"})
	h.Eventually("the report ran", func() bool { return fake.count("report") >= 1 })
	// Settled, the join's timeout trigger included: a done join removes it from the stream.
	settled(t, h, "report")
	got := reports()
	if len(got) != 1 || got[0] != `{"file":[{"f":"a"},{"f":"b"},{"f":"c"}],"summary":{"words":3}}` {
		t.Fatalf("the joined step ran with %v", got)
	}
	recs, err := h.Store.Recent(context.Background(), jobs.Filter{Function: "report"}, 0)
	if err != nil || len(recs) != 1 || recs[0].Status != jobtype.Succeeded || recs[0].FlowID != "start-1" {
		t.Fatalf("report's records: %+v, %v", recs, err)
	}
	// A second flow is a join of its own.
	h.Publish(bus.RunSubject("start"), `{}`, map[string]string{bus.HeaderMsgID: "start-2"})
	h.Eventually("the second flow's report ran", func() bool { return fake.count("report") == 2 })
}

// A join whose awaited step never delivers fails at its join-timeout, naming what never came.
func TestEngineJoinTimesOut(t *testing.T) {
	h, fake, _ := joinFlow(t, "# join-timeout: 2s\n", func(ctx context.Context, j *jobtype.Job) *jobtype.Outcome {
		if strings.Contains(string(j.Payload), `"b"`) {
			<-ctx.Done() // never delivers in time
			return &jobtype.Outcome{Err: ctx.Err(), ExitCode: -1}
		}
		return fileResult(ctx, j)
	})
	errs := h.Sub(bus.ErrorSubject("report"))
	start := time.Now()
	h.Publish(bus.RunSubject("start"), `{}`, map[string]string{bus.HeaderMsgID: "start-t"})
	ev := hosttest.Decode[jobs.ErrorEvent](t, h.Next(errs).Data)
	if !strings.Contains(ev.Error, "join-timeout (2s) passed; never came: file (2 of 3 items)") || ev.FlowID != "start-t" {
		t.Fatalf("error event %+v", ev)
	}
	if waited := time.Since(start); waited < 2*time.Second {
		t.Fatalf("the join failed after %s, before its timeout", waited)
	}
	if n := fake.count("report"); n != 0 {
		t.Fatalf("the failed join ran its step %d times", n)
	}
	if rec := h.Record(ev.JobID); rec.Status != jobtype.Failed || rec.Function != "report" {
		t.Fatalf("record %+v", rec)
	}
}

// An awaited step that fails for good fails a join that has begun gathering, at once.
func TestEngineJoinFailsWithItsStep(t *testing.T) {
	h, fake, _ := joinFlow(t, "", func(ctx context.Context, j *jobtype.Job) *jobtype.Outcome {
		if strings.Contains(string(j.Payload), `"c"`) {
			time.Sleep(300 * time.Millisecond) // after the others have been gathered
			return &jobtype.Outcome{Err: jobtype.Terminal(errBadFile), ExitCode: 2}
		}
		return fileResult(ctx, j)
	})
	errs := h.Sub(bus.ErrorSubject("report"))
	h.Publish(bus.RunSubject("start"), `{}`, map[string]string{bus.HeaderMsgID: "start-f"})
	ev := hosttest.Decode[jobs.ErrorEvent](t, h.Next(errs).Data)
	if !strings.Contains(ev.Error, "file failed for good") || !strings.Contains(ev.Error, "bad file") {
		t.Fatalf("error event %+v", ev)
	}
	if n := fake.count("report"); n != 0 {
		t.Fatalf("the failed join ran its step %d times", n)
	}
}

type badFile struct{}

func (badFile) Error() string { return "bad file" }

var errBadFile = badFile{}

// What a join gathers must be a host's: a caller who publishes to the joining function with
// another step's Job-Function (or on its agent.error subject) runs it as an ordinary job, or
// nothing, and neither adds to nor fails anyone's join.
func TestEngineJoinRefusesForgedParts(t *testing.T) {
	h, fake, reports := joinFlow(t, "", fileResult)
	ctx := context.Background()
	h.Publish(bus.RunSubject("report"), `{"summary":"forged"}`, map[string]string{bus.HeaderFunction: "summary", bus.HeaderFlowID: "start-g",
		bus.HeaderJobID: "someone", bus.HeaderMsgID: "forged-part"})
	h.Eventually("the forged part ran as an ordinary job", func() bool { return fake.count("report") == 1 })
	h.Publish(bus.ErrorSubject("file"), `{"job_id":"x","error":"forged"}`, map[string]string{bus.HeaderFlowID: "start-g", bus.HeaderJobID: "x"})
	h.Publish(bus.RunSubject("start"), `{}`, map[string]string{bus.HeaderMsgID: "start-g"})
	h.Eventually("the real join ran", func() bool { return len(reports()) == 2 })
	if got := reports()[1]; got != `{"file":[{"f":"a"},{"f":"b"},{"f":"c"}],"summary":{"words":3}}` {
		t.Fatalf("the join ran with %s", got)
	}
	recs, err := h.Store.Recent(ctx, jobs.Filter{Function: "report", Flow: "start-g"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Status != jobtype.Succeeded {
			t.Fatalf("a report of the flow %+v: the forged error event failed the join", r)
		}
	}
}
