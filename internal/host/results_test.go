package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// storedOutputs reads every message the results stream holds on subject, oldest first, as a
// consumer reading yesterday's results would.
func storedOutputs(t *testing.T, js jetstream.JetStream, subject string) []jetstream.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, bus.ResultStream)
	if err != nil {
		t.Fatalf("stream %s: %v", bus.ResultStream, err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	n := int(info.State.Subjects[subject])
	if n == 0 {
		return nil
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := c.Fetch(n, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var out []jetstream.Msg
	for m := range batch.Messages() {
		out = append(out, m)
	}
	if len(out) != n {
		t.Fatalf("read %d of the %d messages on %s: %v", len(out), n, subject, batch.Error())
	}
	return out
}

// A job that runs again (its record gone and its trigger stored again, as after a host died
// between publishing its result and recording it) publishes its result again under the same
// message id: the results stream keeps one, a plain subscriber hears one, and the function
// listening on the result runs once. The stream keeps results for a consumer to read later,
// error events too, each with the job's headers.
func TestResultsStreamKeepsEachJobOnce(t *testing.T) {
	var mu sync.Mutex
	afterRuns := map[string]int{} // by the flow of the result it ran on
	runs := hosttest.NewRuns().On("flaky", func(context.Context, *jobtype.Job) *jobtype.Outcome {
		return &jobtype.Outcome{Err: &jobtype.TerminalError{Err: errors.New("no luck")}}
	}).On("after", func(_ context.Context, j *jobtype.Job) *jobtype.Outcome {
		mu.Lock()
		afterRuns[j.FlowID]++
		mu.Unlock()
		return &jobtype.Outcome{Result: []byte(`"after"`)}
	})
	h := hosttest.NewEngine(t, map[string]string{
		"echo.sh":  "echo\n",
		"after.sh": "# on: agent.result.echo\necho\n",
		"flaky.sh": "echo\n",
	}, runs)
	results, errs := h.Sub("agent.result.>"), h.Sub(bus.ErrorSubject("flaky"))
	js, err := jetstream.New(h.NC)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const twice = "job-twice"
	h.Publish(bus.RunSubject("echo"), `{}`, map[string]string{bus.HeaderMsgID: twice})
	first := h.Next(results)
	if first.Subject != bus.ResultSubject("echo") || first.Header.Get(bus.HeaderJobID) != twice {
		t.Fatalf("first result: %s job %q; want echo's result of %s", first.Subject, first.Header.Get(bus.HeaderJobID), twice)
	}
	h.Record(twice)
	h.Eventually("the function listening on echo's results ran", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return afterRuns[twice] == 1
	})

	// The job runs again: its record goes, and its trigger is stored again once the trigger
	// stream has forgotten its id (its window shortened to a second, the results stream's not).
	s, err := js.Stream(ctx, bus.RunStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.Duplicates = time.Second
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	_, v, err := h.Store.GetRev(ctx, twice)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Store.Delete(ctx, twice, v); err != nil {
		t.Fatal(err)
	}
	h.Eventually("the trigger of "+twice+" is stored again", func() bool {
		m := nats.NewMsg(bus.RunSubject("echo"))
		m.Data = []byte(`{}`)
		m.Header.Set(bus.HeaderMsgID, twice)
		ack, err := js.PublishMsg(ctx, m)
		return err == nil && !ack.Duplicate
	})
	h.Eventually(twice+" ran again", func() bool { return runs.Count(twice) == 2 })
	h.Record(twice)

	// A later job's result is heard after anything the rerun published: had its duplicate been
	// republished, it would be in the channel before this one.
	h.Publish(bus.RunSubject("echo"), `{}`, map[string]string{bus.HeaderMsgID: "job-later"})
	for m := h.Next(results); m.Header.Get(bus.HeaderJobID) != "job-later"; m = h.Next(results) {
		if m.Header.Get(bus.HeaderJobID) == twice && m.Subject == bus.ResultSubject("echo") {
			t.Fatalf("a plain subscriber heard %s's result twice", twice)
		}
	}

	var kept []string
	for _, m := range storedOutputs(t, js, bus.ResultSubject("echo")) {
		kept = append(kept, m.Headers().Get(bus.HeaderJobID))
	}
	if len(kept) != 2 || kept[0] != twice || kept[1] != "job-later" {
		t.Errorf("the results stream keeps echo's results of jobs %q; want [%s job-later], each once", kept, twice)
	}
	// Whatever the rerun queued for the listening function has been taken and settled.
	h.Eventually("the listening function's consumer is settled", func() bool {
		c, err := js.Consumer(ctx, bus.RunStream, bus.ConsumerName("after"))
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
	mu.Lock()
	n := afterRuns[twice]
	mu.Unlock()
	if n != 1 {
		t.Errorf("the function listening on agent.result.echo ran %d times for %s's result; want once", n, twice)
	}

	// Error events too: stored, readable later with the job's headers, heard once.
	h.Publish(bus.RunSubject("flaky"), `{}`, map[string]string{bus.HeaderMsgID: "job-flaky"})
	heard := h.Next(errs)
	stored := storedOutputs(t, js, bus.ErrorSubject("flaky"))
	if len(stored) != 1 || stored[0].Headers().Get(bus.HeaderJobID) != "job-flaky" || string(stored[0].Data()) != string(heard.Data) {
		t.Fatalf("the results stream keeps %d error events of flaky; want job-flaky's, as heard (%s)", len(stored), heard.Data)
	}
	var ev struct{ Error string }
	if err := json.Unmarshal(stored[0].Data(), &ev); err != nil || ev.Error == "" {
		t.Errorf("stored error event %s: %v", stored[0].Data(), err)
	}
}

// A result whose stream exists but does not answer (in a cluster: a host beside a node cut off
// from the stream's leader, or a leader being elected) is held and published again until the
// stream takes it; it is not sent as a plain message that the stream never keeps. Only a
// results stream that is gone (removed by hand) makes the result a plain message, which its
// subscribers still hear.
func TestResultHeldWhileItsStreamDoesNotAnswer(t *testing.T) {
	runs := hosttest.NewRuns()
	h := hosttest.NewEngine(t, map[string]string{"echo.sh": "echo\n"}, runs)
	results := h.Sub("agent.result.>")
	js, err := jetstream.New(h.NC)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := js.Stream(ctx, bus.ResultStream)
	if err != nil {
		t.Fatal(err)
	}
	// The stream stays, listening elsewhere: a publish into it gets no responders, as from
	// beyond a partition.
	orig := s.CachedInfo().Config
	away := orig
	away.Subjects, away.SubjectTransform, away.RePublish = []string{"$AH.elsewhere.>"}, nil, nil
	if _, err := js.UpdateStream(ctx, away); err != nil {
		t.Fatal(err)
	}
	h.Publish(bus.RunSubject("echo"), `{}`, map[string]string{bus.HeaderMsgID: "job-held"})
	h.Eventually("job-held ran", func() bool { return runs.Count("job-held") == 1 })
	select {
	case m := <-results:
		t.Fatalf("heard %s's result of %s while its stream did not answer: it went out as a plain message the stream never keeps", m.Subject, m.Header.Get(bus.HeaderJobID))
	case <-time.After(2 * time.Second):
	}
	if rec, _, err := h.Store.GetRev(ctx, "job-held"); err != nil || rec.Status.Final() {
		t.Fatalf("job-held's record while its result is not out: %v (err %v); want it still running", rec, err)
	}

	// The stream answers again: the held result is stored, once, and heard.
	if _, err := js.UpdateStream(ctx, orig); err != nil {
		t.Fatal(err)
	}
	if m := h.Next(results); m.Header.Get(bus.HeaderJobID) != "job-held" {
		t.Fatalf("heard %s's result of %q; want job-held's", m.Subject, m.Header.Get(bus.HeaderJobID))
	}
	if stored := storedOutputs(t, js, bus.ResultSubject("echo")); len(stored) != 1 || stored[0].Headers().Get(bus.HeaderJobID) != "job-held" {
		t.Fatalf("the results stream keeps %d results of echo; want job-held's, once", len(stored))
	}

	// The stream is gone: the result is a plain message, still heard.
	if err := js.DeleteStream(ctx, bus.ResultStream); err != nil {
		t.Fatal(err)
	}
	h.Publish(bus.RunSubject("echo"), `{}`, map[string]string{bus.HeaderMsgID: "job-unkept"})
	if m := h.Next(results); m.Header.Get(bus.HeaderJobID) != "job-unkept" {
		t.Fatalf("heard %s's result of %q; want job-unkept's", m.Subject, m.Header.Get(bus.HeaderJobID))
	}
}
