package annot

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// ParseSchedule parses a schedule string with robfig/cron's ParseStandard:
// 5-field cron ("*/5 * * * *"), "@every <duration>" and descriptors such as
// "@hourly". Times are in the host's local zone unless the string starts
// with "CRON_TZ=<zone> ".
func ParseSchedule(s string) (sched cron.Schedule, err error) {
	// cron v3.0.1 slices out of range on "TZ=<zone>" without a following
	// space; reject that here and recover from anything else the parser
	// might panic on, since the string comes from a user's script.
	if (strings.HasPrefix(s, "TZ=") || strings.HasPrefix(s, "CRON_TZ=")) && !strings.Contains(s, " ") {
		return nil, errors.New("a time zone prefix must be followed by a space and a schedule")
	}
	defer func() {
		if r := recover(); r != nil {
			sched, err = nil, fmt.Errorf("cannot parse schedule: %v", r)
		}
	}()
	return cron.ParseStandard(s)
}

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
