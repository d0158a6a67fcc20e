package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agenthost/host/internal/bus"
)

// MapItems is how many items the map of the map-and-join benchmark has.
const MapItems = 1000

// MapJoinResult is the map of MapItems items onto a jailed bash no-op, joined, against as many
// agent.calls of the same no-op one after another, in one run.
type MapJoinResult struct {
	Items      int
	Map        time.Duration // the mapping step's trigger published → the join's result received
	Sequential time.Duration // MapItems agent.calls of the no-op, one after another
}

// mapJoin's functions: split maps its list onto item, which report joins; noop is item without
// its next: edge, for the sequential calls.
func mapJoinFunctions(n int) map[string]string {
	return map[string]string{
		"split.sh":  fmt.Sprintf("# sandbox\n# next: agent.run.item each result.items\necho \"{\\\"items\\\": [$(seq -s, 0 %d)]}\"\n", n-1),
		"item.sh":   "# sandbox\n# next: agent.run.report\necho '{\"ok\":true}'\n",
		"report.sh": "# sandbox\n# join: item\necho '{\"joined\":true}'\n",
		"noop.sh":   "# sandbox\necho '{\"ok\":true}'\n",
	}
}

// RunMapJoin runs the map and the sequential calls, each once after a warm-up of a few calls.
func RunMapJoin(ctx context.Context, progress io.Writer, parallel int) (MapJoinResult, error) {
	res := MapJoinResult{Items: MapItems}
	dir, fnDir, err := functionsDir("host-mapjoin-", mapJoinFunctions(MapItems))
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	h, err := startHost(ctx, dir, "mapjoin", fnDir, 0, parallel)
	if err != nil {
		return res, err
	}
	defer h.close()
	for range 5 { // the interpreter's files in the page cache, the jails warm
		if _, err := callOnce(ctx, h.client, "noop"); err != nil {
			return res, err
		}
	}
	fmt.Fprintf(progress, "map and join: %d agent.calls of a jailed bash no-op, one after another…\n", MapItems)
	t0 := time.Now()
	for range MapItems {
		if _, err := callOnce(ctx, h.client, "noop"); err != nil {
			return res, err
		}
	}
	res.Sequential = time.Since(t0)

	fmt.Fprintf(progress, "map and join: a map of %d items onto the same no-op (concurrency %d), joined…\n", MapItems, parallel)
	res.Map, err = timeMap(ctx, h)
	return res, err
}

// timeMap publishes one message to split and returns how long until report's joined result
// came: the map of MapItems items, joined (mapJoinFunctions).
func timeMap(ctx context.Context, h *benchHost) (time.Duration, error) {
	joined := make(chan *nats.Msg, 1)
	sub, err := h.client.ChanSubscribe(bus.ResultSubject("report"), joined)
	if err != nil {
		return 0, err
	}
	defer sub.Unsubscribe()
	if err := h.client.Flush(); err != nil {
		return 0, err
	}
	m := nats.NewMsg(bus.RunSubject("split"))
	m.Header.Set(bus.HeaderMsgID, fmt.Sprintf("mapjoin-%d", time.Now().UnixNano()))
	t0 := time.Now()
	if err := h.client.PublishMsg(m); err != nil {
		return 0, err
	}
	select {
	case <-joined:
	case <-time.After(10 * time.Minute):
		return 0, fmt.Errorf("the map of %d items was not joined within 10 minutes", MapItems)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return time.Since(t0), nil
}

// ReportMapJoin prints the map against the sequential calls.
func ReportMapJoin(w io.Writer, r MapJoinResult) {
	fmt.Fprintf(w, "map of %d items onto a jailed bash no-op, joined: %s; %d sequential agent.calls of it: %s; ratio %.2fx (target: at most 0.5x)\n",
		r.Items, round(r.Map), r.Items, round(r.Sequential), float64(r.Map)/float64(r.Sequential))
}
