package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/presence"
	"github.com/agenthost/host/internal/schedule"
)

// `host schedules` lists what the hosts recorded, of the functions some host serves; pause and
// resume write the pause every host watches.
func TestSchedulesCLI(t *testing.T) {
	url, nc, _ := cliNATS(t)
	ctx := context.Background()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := schedule.Open(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, schedule.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	// As hosts record them: tick and nightly served, gone removed from every host.
	for key, v := range map[string]string{
		"fn.tick":    `{"schedule":"@every 1h","last_tick":"2026-11-30T10:00:00Z"}`,
		"fn.nightly": `{"schedule":"0 3 * * *"}`,
		"fn.gone":    `{"schedule":"@daily"}`,
	} {
		if _, err := kv.Put(ctx, key, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	board, err := presence.Open(ctx, js, time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := board.Alive(ctx, "h1"); err != nil {
		t.Fatal(err)
	}
	for _, fn := range []string{"tick", "nightly", "plain"} {
		if err := board.Announce(ctx, fn, presence.Announcement{Version: "v1", Host: "h1"}); err != nil {
			t.Fatal(err)
		}
	}

	for _, c := range []struct {
		args     []string
		code     int
		has, not []string
	}{
		{[]string{"schedules"}, 0, []string{"FUNCTION", "SCHEDULE", "NEXT", "LAST TICK", "PAUSED", "nightly", "0 3 * * *", "tick", "@every 1h"}, []string{"gone", "plain", "yes"}},
		{[]string{"schedules", "pause", "tick"}, 0, []string{"schedule of tick paused"}, nil},
		{[]string{"schedules"}, 0, []string{"yes, by ", "- (paused)"}, nil},
		{[]string{"schedules", "pause", "plain"}, 1, []string{"no host serves this function with a schedule: annotation", "host schedules"}, nil},
		{[]string{"schedules", "resume", "nope"}, 1, []string{"no host serves this function with a schedule: annotation"}, nil},
		{[]string{"schedules", "resume", "tick"}, 0, []string{"schedule of tick resumed"}, nil},
		{[]string{"schedules", "resume", "tick"}, 0, []string{"schedule of tick was not paused"}, nil},
	} {
		out, errOut, code := run(t, append([]string{"--nats", url}, c.args...)...)
		all := out + errOut
		if code != c.code {
			t.Errorf("%v: exit %d, want %d: %q", c.args, code, c.code, all)
			continue
		}
		for _, s := range c.has {
			if !strings.Contains(all, s) {
				t.Errorf("%v: %q lacks %q", c.args, all, s)
			}
		}
		for _, s := range c.not {
			if strings.Contains(out, s) {
				t.Errorf("%v: %q has %q", c.args, out, s)
			}
		}
	}

	if _, _, code := run(t, "--nats", url, "schedules", "pause", "nightly"); code != 0 {
		t.Fatalf("pause nightly: exit %d", code)
	}
	out, _, code := run(t, "--nats", url, "schedules", "--json")
	var list []schedule.Entry
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list) != 2 {
		t.Fatalf("schedules --json: exit %d, %v: %s", code, err, out)
	}
	nightly, tick := list[0], list[1]
	if nightly.Function != "nightly" || !nightly.Paused || nightly.PausedBy == "" || nightly.PausedAt.IsZero() || !nightly.Next.IsZero() || !nightly.LastTick.IsZero() {
		t.Errorf("nightly, paused: %+v; want no next tick", nightly)
	}
	if tick.Function != "tick" || tick.Paused || tick.LastTick.IsZero() || tick.Next.IsZero() {
		t.Errorf("tick: %+v", tick)
	}
	for _, field := range []string{`"function"`, `"schedule"`, `"next"`, `"last_tick"`, `"paused"`, `"paused_by"`} {
		if !strings.Contains(out, field) {
			t.Errorf("schedules --json lacks %s: %s", field, out)
		}
	}
}
