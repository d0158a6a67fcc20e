package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/secrets"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// TestEveryListingTakesJSON: each listing and record command prints, with --json, one JSON
// value holding what its table shows; want is a piece of that JSON as the command prints it.
func TestEveryListingTakesJSON(t *testing.T) {
	url, nc, v := cliNATS(t)
	ctx := context.Background()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	store, err := jobs.Bind(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, rec := range []*jobs.Record{
		{ID: "json-dead", Function: "a", FlowID: "json-flow", Status: jobtype.Failed, Attempts: 1, Started: now, Finished: now, Error: "boom", ReplayedAs: []string{"json-again"}},
		{ID: "json-again", Function: "a", FlowID: "json-flow", Status: jobtype.Succeeded, Attempts: 1, Started: now, Finished: now, ReplayedFrom: "json-dead"},
	} {
		hosttest.PutRecord(t, store, rec)
	}
	m := nats.NewMsg(bus.DeadPrefix + "a.json-dead")
	m.Header.Set(bus.HeaderJobID, "json-dead")
	m.Header.Set(bus.HeaderDeadFunction, "a")
	m.Header.Set(bus.HeaderDeadError, "boom")
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	commitVolume(t, v, "notes", "json-job", map[string]string{"a.txt": "hello"})
	keyFile := filepath.Join(t.TempDir(), "secrets.key")
	key, err := secrets.LoadKey(keyFile, true)
	if err != nil {
		t.Fatal(err)
	}
	sec, err := secrets.Open(ctx, js, key, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := sec.Set(ctx, "json-secret", json.RawMessage(`"a value long enough"`)); err != nil {
		t.Fatal(err)
	}
	fnDir := t.TempDir()
	os.WriteFile(filepath.Join(fnDir, "good.sh"), []byte("echo 1\n"), 0o644)
	os.WriteFile(filepath.Join(fnDir, "Bad.sh"), []byte("echo 1\n"), 0o644)

	cases := []struct {
		args []string
		want []string
		code int
	}{
		{[]string{"jobs", "--json"}, []string{`"id": "json-again"`, `"replayed_from": "json-dead"`}, 0},
		{[]string{"job", "json-dead", "--json"}, []string{`"replayed_as": [`, `"json-again"`}, 0},
		{[]string{"flow", "json-flow", "--json"}, []string{`"json-dead"`, `"json-again"`}, 0},
		{[]string{"dead", "ls", "--json"}, []string{`"job_id": "json-dead"`, `"replayed_as": [`}, 0},
		{[]string{"secrets", "ls", "--json"}, []string{`"json-secret"`}, 0},
		{[]string{"volumes", "ls", "--json"}, []string{`"name": "notes"`}, 0},
		{[]string{"volumes", "files", "notes", "--json"}, []string{`"path": "a.txt"`}, 0},
		{[]string{"volumes", "history", "notes", "--json"}, []string{`"version": 1`, `"job_id": "json-job"`}, 0},
		{[]string{"check", fnDir, "--json"}, []string{`"name": "good"`, `Bad.sh: function name \"Bad\"`}, 1},
		{[]string{"version", "--json"}, []string{`"go_version"`}, 0},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, errOut, code := run(t, append([]string{"--nats", url}, tc.args...)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d: %s %s", code, tc.code, out, errOut)
			}
			if !json.Valid([]byte(out)) {
				t.Fatalf("stdout is not JSON: %q", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %s:\n%s", w, out)
				}
			}
		})
	}

	// Without --json, dead ls says which letters were replayed, and as what.
	out, errOut, code := run(t, "--nats", url, "dead", "ls")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.Contains(lines[0], "REPLAYED AS") || !strings.Contains(lines[1], "json-again") {
		t.Fatalf("dead ls: exit %d, %q %s", code, out, errOut)
	}
}
