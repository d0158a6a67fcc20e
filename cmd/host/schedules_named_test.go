package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/presence"
	"github.com/agenthost/host/internal/schedule"
)

// `host schedules add|named|pause-named|resume-named|rm` store named schedules with the same
// checks and words as the dashboard's form; a paused one lists no next tick.
func TestNamedSchedulesCLI(t *testing.T) {
	url, nc, _ := cliNATS(t)
	ctx := context.Background()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := schedule.Open(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	board, err := presence.Open(ctx, js, time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := board.Alive(ctx, "h1"); err != nil {
		t.Fatal(err)
	}
	if err := board.Announce(ctx, "report", presence.Announcement{Version: "v1", Host: "h1"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args     []string
		code     int
		has, not []string
	}{
		{[]string{"schedules", "add", "nightly", "report", "0 3 * * *", "--args", `{"env": "prod"}`}, 0, []string{`schedule nightly saved: 0 3 * * * runs report with {"env":"prod"}`}, nil},
		{[]string{"schedules", "add", "nightly", "report", "@hourly"}, 1, []string{"a schedule of that name exists"}, nil},
		{[]string{"schedules", "add", "other", "report", "*/61 * * * *"}, 1, []string{"minute step 61 is out of range"}, nil},
		{[]string{"schedules", "add", "other", "report", "@hourly", "--args", "[1]"}, 1, []string{"arguments must be a JSON object"}, nil},
		{[]string{"schedules", "add", "../x", "report", "@hourly"}, 1, []string{`schedule name "../x"`}, nil},
		{[]string{"schedules", "add", "other", "nope", "@hourly"}, 1, []string{"function nope: no host serves it"}, nil},
		{[]string{"schedules", "named"}, 0, []string{"NAME", "nightly", "report", "0 3 * * *", `{"env":"prod"}`}, []string{"yes, by"}},
		{[]string{"schedules", "pause-named", "nightly"}, 0, []string{"changed: true"}, nil},
		{[]string{"schedules", "named", "--json"}, 0, []string{`"paused": true`}, []string{`"next"`}},
		{[]string{"schedules", "resume-named", "nightly"}, 0, []string{"changed: true"}, nil},
		{[]string{"schedules", "rm", "nightly"}, 0, []string{"schedule nightly removed"}, nil},
		{[]string{"schedules", "rm", "nightly"}, 1, []string{"no such named schedule"}, nil},
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
}
