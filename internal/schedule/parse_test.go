package schedule

import (
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	from := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		expr    string
		next    time.Time // the first tick after from, when it parses
		wantErr string    // a part of the error, when it does not
	}{
		{expr: "*/5 * * * *", next: from.Add(5 * time.Minute)},
		{expr: "*/59 * * * *", next: from.Add(59 * time.Minute)},
		{expr: "5/10 * * * *", next: from.Add(5 * time.Minute)},
		{expr: "0 */23 * * *", next: from.Add(23 * time.Hour)},
		{expr: "0 9 * * MON-FRI", next: time.Date(2025, 1, 1, 9, 0, 0, 0, time.UTC)},
		{expr: "0 0 1 jan,Jul ?", next: time.Date(2025, 7, 1, 0, 0, 0, 0, time.UTC)},
		{expr: "0 0 31 12 *", next: time.Date(2025, 12, 31, 0, 0, 0, 0, time.UTC)},
		{expr: "30 1-3/2 * * 0-6", next: from.Add(90 * time.Minute)},
		{expr: "CRON_TZ=UTC */5 * * * *", next: from.Add(5 * time.Minute)},
		{expr: "CRON_TZ=UTC @hourly", next: from.Add(time.Hour)},
		{expr: "@every 90s", next: from.Add(90 * time.Second)},

		{expr: "*/61 * * * *", wantErr: "minute step 61 is out of range 1-59"},
		{expr: "*/60 * * * *", wantErr: "minute step 60 is out of range 1-59"},
		{expr: "*/0 * * * *", wantErr: "minute step 0 is out of range 1-59"},
		{expr: "*/x * * * *", wantErr: "minute step x is out of range 1-59"},
		{expr: "60 * * * *", wantErr: "minute 60 is out of range 0-59"},
		{expr: "0 24 * * *", wantErr: "hour 24 is out of range 0-23"},
		{expr: "0 */24 * * *", wantErr: "hour step 24 is out of range 1-23"},
		{expr: "0 0 32 * *", wantErr: "day of month 32 is out of range 1-31"},
		{expr: "0 0 0 * *", wantErr: "day of month 0 is out of range 1-31"},
		{expr: "0 0 1 13 *", wantErr: "month 13 is out of range 1-12"},
		{expr: "0 0 1 */12 *", wantErr: "month step 12 is out of range 1-11"},
		{expr: "0 0 * * 8", wantErr: "day of week 8 is out of range 0-6"},
		{expr: "0 0 * * 1-7", wantErr: "day of week 7 is out of range 0-6"},
		{expr: "0 0 * * */7", wantErr: "day of week step 7 is out of range 1-6"},
		{expr: "0 0 * * FUN", wantErr: `day of week "FUN" is not a number 0-6 or a name such as MON`},
		{expr: "0 0 * JANUARY *", wantErr: `month "JANUARY" is not a number 1-12 or a name such as JAN`},
		{expr: "30-10 * * * *", wantErr: "minute range 30-10 is reversed: write 10-30"},
		{expr: "0 5,25 * * *", wantErr: "hour 25 is out of range 0-23"},
		{expr: "-5 * * * *", wantErr: `minute "" is not a number 0-59`},
		{expr: "* * * *", wantErr: "4 fields, want 5"},
		{expr: "0 0 0 0 0 0", wantErr: "6 fields, want 5"},
		{expr: "", wantErr: "0 fields, want 5"},
		{expr: "TZ=UTC", wantErr: "time zone prefix must be followed by a space"},
		{expr: "CRON_TZ=Nowhere/City * * * * *", wantErr: "Nowhere/City"},
		{expr: "CRON_TZ=UTC */61 * * * *", wantErr: "minute step 61 is out of range 1-59"},
		{expr: "@yearlyish", wantErr: "unrecognized descriptor"},
		{expr: "@every soon", wantErr: "soon"},
	}
	for _, tc := range cases {
		sched, err := Parse(tc.expr)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Parse(%q) = %v, want an error with %q", tc.expr, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.expr, err)
			continue
		}
		if got := sched.Next(from); !got.Equal(tc.next) {
			t.Errorf("Parse(%q).Next(%v) = %v, want %v", tc.expr, from, got, tc.next)
		}
	}
}

// FuzzParse: Parse never panics, and what it accepts has a next tick computable without panic.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"*/5 * * * *", "*/61 * * * *", "*/0 * * * *", "5/10 * * * *", "0 9 * * MON-FRI",
		"30-10 * * * *", "TZ=UTC", "CRON_TZ=UTC @hourly", "@every 90s", "0 0 1 jan,Jul ?", "1-/2 * * * *", "*/ * * * *"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sched, err := Parse(s)
		if err != nil {
			return
		}
		sched.Next(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	})
}
