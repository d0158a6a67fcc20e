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
	count, per, err := splitPer(value)
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
	spec, per, err := splitPer(value)
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

// splitPer cuts "<head> per <expr>" into its head and expression ("" when there is no per).
func splitPer(value string) (head, per string, err error) {
	head, rest, _ := strings.Cut(strings.TrimSpace(value), " ")
	rest = strings.TrimSpace(rest)
	if rest == "" {
		return head, "", nil
	}
	word, expr, _ := strings.Cut(rest, " ")
	switch {
	case word != "per":
		return "", "", fmt.Errorf("%q: after %s comes \"per <expr>\" or nothing, not %s", value, head, strconv.Quote(word))
	case strings.TrimSpace(expr) == "":
		return "", "", fmt.Errorf("%q has no expression after \"per\"", value)
	}
	return head, strings.TrimSpace(expr), nil
}
