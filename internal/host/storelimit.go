package host

import (
	"fmt"
	"strings"
	"time"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/bus"
)

// ParseStoreLimit reads one `serve --store-limit` value: <store>=<size>[,<age>], where store is
// one of the host's streams (AGENT_RUN, AGENT_RESULTS, AGENT_LOGS, AGENT_DEAD), a KV bucket or
// an object store (agent_jobs, agent_volumes, ...), size is bytes as an annotation writes them
// (512Mi, 4Gi; -1: no bound) and age, a stream's only, is a Go duration or a number of days
// (30d). Whether the store exists is checked at start, against the server.
func ParseStoreLimit(spec string) (string, bus.StoreLimit, error) {
	fail := func(why string, args ...any) (string, bus.StoreLimit, error) {
		return "", bus.StoreLimit{}, fmt.Errorf("--store-limit %q: %s; want <store>=<size>[,<age>], e.g. AGENT_RESULTS=4Gi,30d", spec, fmt.Sprintf(why, args...))
	}
	name, value, ok := strings.Cut(spec, "=")
	name = strings.TrimSpace(name)
	if !ok || name == "" || value == "" {
		return fail("no store or no size")
	}
	size, age, hasAge := strings.Cut(value, ",")
	var l bus.StoreLimit
	if size = strings.TrimSpace(size); size == "-1" {
		l.Bytes = -1
	} else {
		n, err := annot.ParseSize(size)
		if err != nil {
			return fail("size: %v", err)
		}
		if n == 0 {
			return fail("a size of 0 bytes; -1 is no bound")
		}
		l.Bytes = n
	}
	if hasAge {
		d, err := parseAge(strings.TrimSpace(age))
		if err != nil {
			return fail("age: %v", err)
		}
		l.Age = d
	}
	return name, l, nil
}

func parseAge(s string) (time.Duration, error) {
	var d time.Duration
	var err error
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n int
		if _, err = fmt.Sscanf(days, "%d", &n); err == nil && fmt.Sprint(n) == days {
			d = time.Duration(n) * 24 * time.Hour
		} else {
			err = fmt.Errorf("%q is not a number of days", s)
		}
	} else if d, err = time.ParseDuration(s); err != nil {
		err = fmt.Errorf("%q is not a duration (30d, 12h, 90m)", s)
	}
	if err == nil && d <= 0 {
		err = fmt.Errorf("%q must be longer than zero", s)
	}
	return d, err
}
