package host_test

import (
	"strings"
	"testing"

	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// `host schedules pause` stops a schedule's ticks on the host (each is logged as skipped
// instead), the listing says who paused it, and resume brings the ticks back.
func TestSchedulePauseAndResume(t *testing.T) {
	fake := newFake()
	h := hosttest.NewEngine(t, map[string]string{"tick.sh": "# schedule: @every 1s\necho\n"}, fake)
	c, err := client.New(t.Context(), h.NC)
	if err != nil {
		t.Fatal(err)
	}
	const triggered, skipped = "scheduled run triggered", "scheduled tick skipped: the schedule is paused (`host schedules resume` resumes it)"
	h.WaitLog(triggered, 0)

	if err := c.PauseSchedule(t.Context(), "tick", "tester@test"); err != nil {
		t.Fatal(err)
	}
	if got := h.WaitLog("schedule paused", 0).ContextMap()["by"]; got != "tester@test" {
		t.Errorf("the pause is logged by %v, want tester@test", got)
	}
	h.WaitLog(skipped, 0)
	fired := h.Logs.FilterMessage(triggered).Len()
	h.WaitLog(skipped, 1) // a whole tick later: skipped too, none fired
	if now := h.Logs.FilterMessage(triggered).Len(); now != fired {
		t.Fatalf("%d ticks fired while paused", now-fired)
	}

	// A host that starts while the schedule is paused (a restart, or another machine) skips
	// its ticks from the first one.
	_, later := h.AddEngineHost(t, fake)
	natstest.Eventually(t, "the later host skips a tick", func() bool { return later.FilterMessage(skipped).Len() > 0 })
	if n := later.FilterMessage(triggered).Len(); n != 0 {
		t.Fatalf("the later host fired %d ticks while paused", n)
	}

	list, err := c.Schedules(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Function != "tick" || list[0].Schedule != "@every 1s" || !list[0].Paused ||
		list[0].PausedBy != "tester@test" || list[0].LastTick.IsZero() || !list[0].Next.IsZero() {
		t.Fatalf("listing %+v; want it paused, with no next tick", list)
	}

	was, err := c.ResumeSchedule(t.Context(), "tick")
	if err != nil || !was {
		t.Fatalf("resume: %v, %v", was, err)
	}
	h.WaitLog("schedule resumed", 0)
	h.WaitLog(triggered, h.Logs.FilterMessage(triggered).Len())
	if list, err := c.Schedules(t.Context()); err != nil || list[0].Paused || list[0].Next.IsZero() {
		t.Fatalf("listing after resume %+v, %v", list, err)
	}
	if was, err := c.ResumeSchedule(t.Context(), "tick"); err != nil || was {
		t.Fatalf("a second resume: %v, %v; want not paused", was, err)
	}
}

// A function without a schedule cannot be paused, and the error says how to list schedules.
func TestSchedulePauseUnknown(t *testing.T) {
	h := hosttest.NewEngine(t, map[string]string{"plain.sh": "echo\n", "tick.sh": "# schedule: @daily\necho\n"}, newFake())
	c, err := client.New(t.Context(), h.NC)
	if err != nil {
		t.Fatal(err)
	}
	h.Eventually("tick's schedule is recorded", func() bool {
		list, err := c.Schedules(t.Context())
		return err == nil && len(list) == 1
	})
	for _, fn := range []string{"plain", "nope"} {
		if err := c.PauseSchedule(t.Context(), fn, ""); err == nil || !strings.Contains(err.Error(), "host schedules") {
			t.Errorf("pause %s: %v", fn, err)
		}
		if _, err := c.ResumeSchedule(t.Context(), fn); err == nil {
			t.Errorf("resume %s: no error", fn)
		}
	}
}
