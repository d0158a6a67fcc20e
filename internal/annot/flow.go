package annot

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Limit is a "limit: <n> [per <expr>]" line: at most N runs of the function at once across
// every host on one NATS, per value of Per when given (a CEL expression over args, compiled
// by package route when the function loads).
type Limit struct {
	N    int
	Per  string
	Line int
}

// Rate is a "rate: <n>/<duration> [per <expr>]" line: at most N starts per Period across every
// host, per value of Per when given.
type Rate struct {
	N      int
	Period time.Duration
	Per    string
	Line   int
}

// Debounce is a "debounce: <duration> [by <expr>]" line: a message starts a run only after Wait
// with no newer message of its key (By's value, a CEL expression over args; one key when "");
// the run gets the newest message's arguments, the earlier messages end superseded.
type Debounce struct {
	Wait time.Duration
	By   string
	Line int
}

// Priority is a "priority: <expr>" line: a CEL expression over args giving each message a
// priority from 1 to 10 (a constant such as "7" is one); when messages of the function wait,
// a higher one starts first. Functions without it give every message DefaultPriority.
type Priority struct {
	Expr string
	Line int
}

// Bounds of a priority.
const (
	MinPriority     = 1
	MaxPriority     = 10
	DefaultPriority = 5
)

// MaxDebounce bounds a debounce's quiet period: a waiting message is kept by JetStream and its
// key's entry by the flow-control bucket (25 h), and a week covers any burst worth waiting for.
const MaxDebounce = 7 * 24 * time.Hour

// MaxLimit bounds `limit:`: each run of a key is a holder in one KeyValue entry.
const MaxLimit = 1000

// MaxRate bounds the n of `rate:`: the starts of the last period are kept in one KeyValue
// entry, one timestamp each.
const MaxRate = 1000

// Bounds of a rate's period: under a second the hosts' clocks disagree by more than the
// period means; past a day the starts outlive what the flow-control bucket keeps.
const (
	MinRatePeriod = time.Second
	MaxRatePeriod = 24 * time.Hour
)

// parseLimit reads "<n> [per <expr>]".
func parseLimit(line int, value string) (*Limit, error) {
	count, per, err := splitWord(value, "per")
	if err != nil {
		return nil, err
	}
	n, err := parseCount(count, 1, MaxLimit)
	if err != nil {
		return nil, err
	}
	return &Limit{N: n, Per: per, Line: line}, nil
}

// parseRate reads "<n>/<duration> [per <expr>]".
func parseRate(line int, value string) (*Rate, error) {
	spec, per, err := splitWord(value, "per")
	if err != nil {
		return nil, err
	}
	count, period, ok := strings.Cut(spec, "/")
	if !ok {
		return nil, fmt.Errorf("%q has no \"/\" between the count and the period", spec)
	}
	n, err := parseCount(count, 1, MaxRate)
	if err != nil {
		return nil, err
	}
	written := period
	if period != "" && (period[0] < '0' || period[0] > '9') {
		period = "1" + period // "5/s" reads as "5/1s"
	}
	d, err := time.ParseDuration(period)
	if err != nil {
		return nil, fmt.Errorf("period %q is not a Go duration (units s, m, h)", written)
	}
	if d < MinRatePeriod || d > MaxRatePeriod {
		return nil, fmt.Errorf("period %s is outside 1s to 24h", d)
	}
	return &Rate{N: n, Period: d, Per: per, Line: line}, nil
}

// parseDebounce reads "<duration> [by <expr>]".
func parseDebounce(line int, value string) (*Debounce, error) {
	wait, by, err := splitWord(value, "by")
	if err != nil {
		return nil, err
	}
	d, err := time.ParseDuration(wait)
	if err != nil {
		return nil, fmt.Errorf("%q is not a Go duration (units ms, s, m, h)", wait)
	}
	if d <= 0 || d > MaxDebounce {
		return nil, fmt.Errorf("%s is outside 1ms to 7 days (168h)", d)
	}
	return &Debounce{Wait: d, By: by, Line: line}, nil
}

// splitWord cuts "<head> <word> <expr>" into its head and expression ("" when there is no
// word).
func splitWord(value, want string) (head, per string, err error) {
	head, rest, _ := strings.Cut(strings.TrimSpace(value), " ")
	rest = strings.TrimSpace(rest)
	if rest == "" {
		return head, "", nil
	}
	word, expr, _ := strings.Cut(rest, " ")
	switch {
	case word != want:
		return "", "", fmt.Errorf("%q: after %s comes \"%s <expr>\" or nothing, not %s", value, head, want, strconv.Quote(word))
	case strings.TrimSpace(expr) == "":
		return "", "", fmt.Errorf("%q has no expression after %q", value, want)
	}
	return head, strings.TrimSpace(expr), nil
}
