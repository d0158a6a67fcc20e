package schedule_test

import (
	"strings"
	"testing"
	"time"

	"github.com/agenthost/host/internal/schedule"
)

// A named schedule's arguments are a JSON object, compacted; anything else is refused saying so.
func TestCheckArgs(t *testing.T) {
	for in, want := range map[string]string{"": "{}", ` { "a" : 1 } `: `{"a":1}`} {
		got, err := schedule.CheckArgs(in)
		if err != nil || string(got) != want {
			t.Errorf("CheckArgs(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"[1]", "null", `{"a":`, "3", `{"a":"` + strings.Repeat("x", 65<<10) + `"}`} {
		if _, err := schedule.CheckArgs(bad); err == nil {
			t.Errorf("CheckArgs(%.20q) took it", bad)
		}
	}
}

// The next five ticks are those every host computes: @every aligned to the epoch, cron in UTC.
func TestNextN(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 500, time.UTC)
	ticks, err := schedule.NextN("@every 1s", now, 5)
	if err != nil || len(ticks) != 5 || !ticks[0].Equal(now.Truncate(time.Second).Add(time.Second)) || ticks[4].Sub(ticks[0]) != 4*time.Second {
		t.Fatalf("@every 1s: %v %v", ticks, err)
	}
	ticks, err = schedule.NextN("0 9 * * MON", now, 5)
	if err != nil || len(ticks) != 5 || ticks[0].Weekday() != time.Monday || ticks[0].Hour() != 9 || ticks[1].Sub(ticks[0]) != 7*24*time.Hour {
		t.Fatalf("0 9 * * MON: %v %v", ticks, err)
	}
	if _, err := schedule.NextN("*/61 * * * *", now, 5); err == nil || !strings.Contains(err.Error(), "minute step 61 is out of range") {
		t.Fatalf("*/61: %v", err)
	}
}

func TestCheckNamedName(t *testing.T) {
	for _, ok := range []string{"a", "nightly-report", "x_1"} {
		if err := schedule.CheckNamedName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "../x", "a.b", "A", "-a", strings.Repeat("a", 64), "a b", "a>"} {
		if err := schedule.CheckNamedName(bad); err == nil {
			t.Errorf("%q taken", bad)
		}
	}
}
