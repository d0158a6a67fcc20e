package annot

import (
	"fmt"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/agenthost/host/internal/schedule"
)

// ParseSchedule parses a schedule string: 5-field cron ("*/5 * * * *"),
// "@every <duration>" and descriptors such as "@hourly", with an optional
// "CRON_TZ=<zone> " prefix. schedule.Parse checks every field's range before
// robfig/cron parses it.
func ParseSchedule(s string) (cron.Schedule, error) {
	return schedule.Parse(s)
}

// CheckSchedule is checkSchedule for a schedule given otherwise than by a schedule: line (a
// named schedule: `host schedules add`, the dashboard), so both are refused in the same words.
func CheckSchedule(s string) error { return checkSchedule(s) }

// checkSchedule validates a "schedule:" value. A schedule that parses but
// never fires ("0 0 30 2 *", February 30th) is an error too: the user
// surely meant something else.
func checkSchedule(s string) error {
	sched, err := ParseSchedule(s)
	if err != nil {
		return fmt.Errorf("%q is not a valid schedule (%v)", s, err)
	}
	if sched.Next(time.Now()).IsZero() {
		return fmt.Errorf("%q never fires", s)
	}
	return nil
}
