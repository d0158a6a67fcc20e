package schedule

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/robfig/cron/v3"
)

// field is one of the five fields of a standard cron expression.
type field struct {
	name     string
	min, max int
	names    map[string]int // month and weekday names, lower case
}

var fields = [5]field{
	{name: "minute", min: 0, max: 59},
	{name: "hour", min: 0, max: 23},
	{name: "day of month", min: 1, max: 31},
	{name: "month", min: 1, max: 12, names: map[string]int{
		"jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6,
		"jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12,
	}},
	{name: "day of week", min: 0, max: 6, names: map[string]int{
		"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6,
	}},
}

// Parse parses a `schedule:` value: five cron fields ("*/5 * * * *"), "@every <duration>" or a
// descriptor such as "@hourly", optionally after "CRON_TZ=<zone> ". Ticks are in UTC unless the
// zone is given (see Next).
//
// robfig/cron does the parsing, but it accepts steps larger than their field ("*/61" is read as
// "0" and fires hourly, not what anyone meant), so every field is checked here first, with an
// error that names the field and its allowed range. No maintained Go cron parser that rejects
// these is served to this project (gocron v2 wraps robfig's), hence the check in front.
func Parse(s string) (sched cron.Schedule, err error) {
	spec := s
	if strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ=") {
		// cron v3.0.1 slices out of range on "TZ=<zone>" without a following space.
		i := strings.IndexAny(spec, " \t")
		if i < 0 {
			return nil, errors.New("a time zone prefix must be followed by a space and a schedule")
		}
		spec = strings.TrimSpace(spec[i:])
	}
	if !strings.HasPrefix(spec, "@") {
		if err := checkFields(spec); err != nil {
			return nil, err
		}
	}
	// The string comes from a user's script: a parser panic must not take the host down.
	defer func() {
		if r := recover(); r != nil {
			sched, err = nil, fmt.Errorf("cannot parse schedule: %v", r)
		}
	}()
	return cron.ParseStandard(s)
}

// checkFields checks the five fields of a cron expression against their ranges.
func checkFields(spec string) error {
	parts := strings.Fields(spec)
	if len(parts) != len(fields) {
		return fmt.Errorf("%d fields, want 5: minute hour day-of-month month day-of-week, or a descriptor such as @every 10m or @hourly", len(parts))
	}
	for i, p := range parts {
		for item := range strings.SplitSeq(p, ",") {
			if err := fields[i].check(item); err != nil {
				return err
			}
		}
	}
	return nil
}

// check checks one comma-separated item of a field: "*", "?", "v", "a-b", each with an optional
// "/step".
func (f field) check(item string) error {
	rng, stepText, hasStep := strings.Cut(item, "/")
	switch {
	case rng == "*" || rng == "?":
	case strings.Contains(rng, "-"):
		a, b, _ := strings.Cut(rng, "-")
		lo, err := f.value(a)
		if err != nil {
			return err
		}
		hi, err := f.value(b)
		if err != nil {
			return err
		}
		if lo > hi {
			return fmt.Errorf("%s range %s is reversed: write %s-%s", f.name, rng, b, a)
		}
	default:
		// A single value; with a step robfig reads "5/10" as "5-max/10".
		if _, err := f.value(rng); err != nil {
			return err
		}
	}
	if !hasStep {
		return nil
	}
	step, err := strconv.Atoi(stepText)
	if maxStep := f.max - f.min; err != nil || step < 1 || step > maxStep {
		return fmt.Errorf("%s step %s is out of range 1-%d", f.name, stepText, maxStep)
	}
	return nil
}

// value parses one number or name of the field and checks it is in range.
func (f field) value(s string) (int, error) {
	if v, ok := f.names[strings.ToLower(s)]; ok {
		return v, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		if f.names != nil {
			return 0, fmt.Errorf("%s %q is not a number %d-%d or a name such as %s", f.name, s, f.min, f.max, f.example())
		}
		return 0, fmt.Errorf("%s %q is not a number %d-%d", f.name, s, f.min, f.max)
	}
	if v < f.min || v > f.max {
		return 0, fmt.Errorf("%s %d is out of range %d-%d", f.name, v, f.min, f.max)
	}
	return v, nil
}

func (f field) example() string {
	if f.min == 1 {
		return "JAN"
	}
	return "MON"
}
