package host

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

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

// storeRoom is an embedded store that says how big it is (*bus.EmbeddedStore).
type storeRoom interface {
	Room() (maxStore, reserved int64, err error)
}

// The sizing of the streams whose default limit reserves store space (AGENT_RESULTS and
// AGENT_LOGS, 1 GiB each): together at most sizedShare of the store's room, so that the rest,
// which no limit reserves (triggers, job records, volumes), has the other half; each at least
// minSized, below which a store is too small to size anything from.
const (
	sizedShare = 2 // the sized streams take at most 1/sizedShare of the room
	minSized   = 64 << 20
)

// sizeStores fits the default limits of the host's streams to the embedded server's store, whose
// max_file_store every stream's max bytes is reserved against (by default 75% of the free disk:
// 1.5 GB on a 2 GB data disk, where the 2 GiB of defaults did not fit and `serve` exited). A
// limit the operator set (--store-limit) is kept as it is. It logs what it chose, and refuses a
// store too small for even minSized each, naming the --store-limit values that would fit. On an
// external NATS, whose store it cannot see, the defaults stand and the server's refusal says
// which limit to set (bus.EnsureResultStream, bus.EnsureLogStream).
func (h *Host) sizeStores(ctx context.Context) error {
	room, ok := h.cfg.Store.(storeRoom)
	if !ok || h.cfg.Store == nil {
		return nil
	}
	maxStore, reserved, err := room.Room()
	if err != nil || maxStore <= 0 {
		h.log.Warn("cannot read the size of the embedded JetStream store; the streams keep their default limits", zap.Error(err))
		return nil
	}
	defaults := []struct {
		name  string
		bytes int64
	}{{bus.ResultStream, bus.DefaultResultMaxBytes}, {bus.LogStream, bus.DefaultLogMaxBytes}}
	free := maxStore - reserved
	var sized []string
	for _, d := range defaults {
		if l := h.cfg.Streams.Limits[d.name]; l.Bytes != 0 {
			continue // the operator's
		}
		sized = append(sized, d.name)
		// A stream made before reserves its bytes already: they are its own room.
		if s, err := h.js.Stream(ctx, d.name); err == nil {
			free += max(s.CachedInfo().Config.MaxBytes, 0)
		}
	}
	if len(sized) == 0 {
		return nil
	}
	each := free / sizedShare / int64(len(sized))
	if each < minSized {
		var fit []string
		for _, name := range sized {
			fit = append(fit, fmt.Sprintf("--store-limit %s=%s", name, sizeText(max(each, 1<<20))))
		}
		return fmt.Errorf("the JetStream store is too small for the host: max_file_store is %s, %s of it free, and the host sizes %v from half of that, at least %s each; "+
			"give the store more room (a larger disk under --data, or max_file_store in --nats-config), or start with %s (each stream drops its oldest messages at its limit)",
			sizeText(maxStore), sizeText(max(free, 0)), sized, sizeText(minSized), strings.Join(fit, " "))
	}
	fields := []zap.Field{zap.String("max_file_store", sizeText(maxStore)), zap.String("free", sizeText(free))}
	limits := maps.Clone(h.cfg.Streams.Limits)
	if limits == nil {
		limits = map[string]bus.StoreLimit{}
	}
	for _, d := range defaults {
		if !slices.Contains(sized, d.name) {
			continue
		}
		l := limits[d.name]
		l.Bytes = min(d.bytes, each)
		limits[d.name] = l
		fields = append(fields, zap.String(d.name, sizeText(l.Bytes)))
	}
	h.cfg.Streams.Limits = limits
	h.log.Info("sized the host's stream limits to the JetStream store (set --store-limit to choose them)", fields...)
	return nil
}

// sizeText writes bytes as --store-limit reads them: whole MiB or GiB when they are.
func sizeText(b int64) string {
	switch {
	case b >= 1<<30 && b%(1<<30) == 0:
		return fmt.Sprintf("%dGi", b>>30)
	case b >= 1<<20:
		return fmt.Sprintf("%dMi", b>>20)
	default:
		return fmt.Sprint(b)
	}
}
