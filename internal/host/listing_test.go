package host_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/host"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// TestStoppedAndDeadHostsLeaveTheListing: `host functions` listed hosts in a random order, and
// a host that stopped stayed listed against every function for good (5 minutes and more seen).
// Hosts come sorted; one that stops leaves the listing when its Shutdown returns; one that
// dies (its connection gone, nothing withdrawn) leaves it once its announcements expire,
// while the live host, whose announcements are as old, stays: it keeps writing them.
func TestStoppedAndDeadHostsLeaveTheListing(t *testing.T) {
	const ttl = 4 * time.Second
	short := func(c *host.Config) { c.AnnounceTTL = ttl }
	files := map[string]string{"hello.sh": "echo\n"}
	h := hosttest.NewEngine(t, files, newFake(), short)
	// Named to sort apart from the order they start in.
	start := func(id string) (*host.Host, func()) {
		nc := h.ConnectAs(t, id)
		other, err := host.New(host.Config{FunctionsDir: h.FnDir, DataDir: h.Dir + "/data-" + id, HostID: id, AckWait: 5 * time.Second,
			AnnounceTTL: ttl, Runner: newFake()}, nc, zaptest.NewLogger(t).Named(id), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		if err := other.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			other.Shutdown(ctx)
		})
		return other, nc.Close
	}
	stops, _ := start("b-stops")
	_, die := start("a-dies")

	ctx := context.Background()
	c, err := client.New(ctx, h.NC)
	if err != nil {
		t.Fatal(err)
	}
	hosts := func() []string {
		t.Helper()
		// The announcements alone, as `host functions` reads them (without the job counts, whose
		// index read each poll would make a consumer of its own).
		fns, err := c.FunctionsOf(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fns {
			if f.Name == "hello" {
				return f.Hosts
			}
		}
		return nil
	}
	if got, want := hosts(), []string{"a-dies", "b-stops", "test"}; !slices.Equal(got, want) {
		t.Fatalf("hosts %v, want %v", got, want)
	}

	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stops.Shutdown(sctx)
	if got, want := hosts(), []string{"a-dies", "test"}; !slices.Equal(got, want) {
		t.Fatalf("after b-stops stopped: hosts %v, want %v", got, want)
	}

	die()
	var got []string
	h.Eventually("the dead host's announcement expires", func() bool {
		got = hosts()
		return !slices.Contains(got, "a-dies")
	})
	if want := []string{"test"}; !slices.Equal(got, want) {
		t.Fatalf("after a-dies died: hosts %v, want %v (the live host must stay listed)", got, want)
	}
	if reply := h.Call("hello", `{}`); reply.Header.Get(bus.HeaderJobStatus) != "succeeded" {
		t.Fatalf("the live host no longer takes calls: %s", reply.Data)
	}
}

// TestTruncationNoticeIsTheLastLine: with other jobs logging at the same time, a capped job's
// stored log ended without its "[host] output truncated…" line, though its record said
// log_truncated; and a line the host wrote after it (its volume committed) came after it. The
// notice is the last line stored, every time.
func TestTruncationNoticeIsTheLastLine(t *testing.T) {
	h := hosttest.New(t, map[string]string{
		"capped.sh": "# sandbox\n# concurrency: 3\n# volume: capped-$args[n] data\nseq -f '%084g' 1 20000\necho kept > data/f\necho '\"done\"'\n",
		"chatty.sh": "# sandbox\n# concurrency: 3\nfor i in $(seq 1 3000); do echo \"chatty $i\"; done\necho '\"ok\"'\n",
	}, func(c *app.Config) { c.MaxLogBytes = 256 << 10 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := client.New(ctx, h.NC)
	if err != nil {
		t.Fatal(err)
	}
	var capped []string
	for i := range 3 {
		id := fmt.Sprintf("capped-%d-%s", i, ids.New())
		capped = append(capped, id)
		if err := c.Invoke(ctx, "capped", id, fmt.Appendf(nil, `{"n":%d}`, i)); err != nil {
			t.Fatal(err)
		}
		if err := c.Invoke(ctx, "chatty", fmt.Sprintf("chatty-%d-%s", i, ids.New()), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range capped {
		rec := h.Record(id)
		if rec.Status != jobtype.Succeeded || rec.LogTruncated == 0 {
			t.Fatalf("%s: %s, log_truncated %d", id, rec.Status, rec.LogTruncated)
		}
		lines, err := c.Logs(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		last := lines[len(lines)-1]
		if want := fmt.Sprintf("[host] output truncated after %d bytes; ", rec.LogTruncated); !strings.HasPrefix(last.Text, want) || last.Seq != rec.LogLastSeq {
			t.Errorf("%s: the log ends with %q (sequence %d, the record names %d), want %q…", id, last.Text[:min(len(last.Text), 90)], last.Seq, rec.LogLastSeq, want)
		}
		committed := slices.IndexFunc(lines, func(l client.LogLine) bool { return strings.Contains(l.Text, ": committed version") })
		if committed < 0 || committed == len(lines)-1 {
			t.Errorf("%s: the volume's commit line is at %d of %d lines", id, committed, len(lines))
		}
	}
}
