package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/audit"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/people"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// A scripted session of administrative acts, done as an operator does them with the CLI
// against a real host (jails and all), yields exactly the audit entries it should, in order:
// who (the operator's user@machine; a user's own NATS login's name), the face, the act and its
// target; `host audit --user` prints them back. Each job the CLI queues says the operator
// started it, as a host vouched for.
func TestAuditOfAScriptedSession(t *testing.T) {
	h := hosttest.New(t, map[string]string{
		"plan.sh":  "# sandbox\n# approve: timeout 1h\n# next: agent.run.apply\necho '{\"change\":\"drop table\"}'\n",
		"apply.sh": "# sandbox\necho '\"applied\"'\n",
		"note.sh":  "# sandbox\n# volume: notes notes\nread -r payload\necho \"$payload\" >> notes/log\nwc -l < notes/log\n",
	})
	ctx := context.Background()
	url := h.Srv.ClientURL()
	home := t.TempDir()
	me := client.CanceledBy()
	js, err := jetstream.New(h.NC)
	if err != nil {
		t.Fatal(err)
	}
	st, err := people.Open(ctx, js, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Add(ctx, people.User{Name: "dan", Role: people.Approver, NATS: true}); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) string {
		t.Helper()
		out, errOut, code := runNoKey(t, home, append([]string{"--nats", url}, args...)...)
		if code != 0 {
			t.Fatalf("host %s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
		return strings.TrimSpace(out)
	}

	cli("secrets", "set", "api-token", `"first-token-value-1111"`)
	cli("secrets", "rm", "api-token")
	cli("hooks", "add", "gh", "hmac", "--key", "ghkey")
	cli("hooks", "rm", "gh")
	plans := make([]string, 4)
	for i := range plans {
		plans[i] = cli("invoke", "plan")
	}
	for _, id := range plans {
		h.Eventually("job "+id+" waits", func() bool {
			rec, err := h.Store.Get(ctx, id)
			return err == nil && rec.Status == jobtype.Waiting
		})
	}
	if rec, _ := h.Store.Get(ctx, plans[0]); rec.StartedBy != "operator "+me || rec.Starter != "" {
		t.Fatalf("a job `host invoke` queued: started_by %q, starter %q", rec.StartedBy, rec.Starter)
	}
	cli("approve", plans[0], "--comment", "fine")
	// A rejection says so from its first line: it starts no next steps.
	if out, errOut, code := runNoKey(t, home, "--nats", url, "approve", "--reject", plans[1]); code != 0 ||
		!strings.HasPrefix(errOut, "rejecting job "+plans[1]+": ") || strings.Contains(errOut+out, "next steps") || !strings.Contains(out, "rejected by") {
		t.Fatalf("approve --reject: exit %d, stdout %q, stderr %q; want it to say it rejects, never that next steps start", code, out, errOut)
	}
	cli("cancel", plans[2])
	// dan's own NATS login decides as dan (this server checks no passwords; the host takes dan
	// from the user store by the subject, agent.admin.approvals.decide.dan).
	if out := cli("--user", "dan", "--password", "not-checked-here", "approve", plans[3]); !strings.Contains(out, "approved by dan") {
		t.Fatalf("dan's approval: %s", out)
	}
	replayed := cli("dead", "replay", plans[1])
	if got := string(h.Call("note", `{"n":1}`).Data); got != "1" {
		t.Fatalf("first note: %s", got)
	}
	if got := string(h.Call("note", `{"n":2}`).Data); got != "2" {
		t.Fatalf("second note: %s", got)
	}
	cli("volumes", "restore", "notes", "1")

	want := []audit.Entry{
		{Who: me, Face: "cli", Act: "secret.set", Target: "api-token"},
		{Who: me, Face: "cli", Act: "secret.rm", Target: "api-token"},
		{Who: me, Face: "cli", Act: "hook.add", Target: "gh"},
		{Who: me, Face: "cli", Act: "hook.rm", Target: "gh"},
		{Who: me, Face: "cli", Act: "approval.approve", Target: plans[0]},
		{Who: me, Face: "cli", Act: "approval.reject", Target: plans[1]},
		{Who: me, Face: "cli", Act: "job.cancel", Target: plans[2]},
		{Who: "dan", Face: "nats", Act: "approval.approve", Target: plans[3]},
		{Who: me, Face: "cli", Act: "dead.replay", Target: plans[1], Detail: "as job " + replayed},
		{Who: me, Face: "cli", Act: "volume.restore", Target: "notes", Detail: "version 3 made equal to version 1"},
	}
	got, err := audit.Read(ctx, js, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	sameEntries(t, "audit.Read", got, want)

	var printed []audit.Entry
	if err := json.Unmarshal([]byte(cli("audit", "--user", me, "--json")), &printed); err != nil {
		t.Fatal(err)
	}
	var mine []audit.Entry
	for _, w := range want {
		if w.Who == me {
			mine = append(mine, w)
		}
	}
	sameEntries(t, "host audit --user "+me, printed, mine)
	table := cli("audit", "--user", "dan", "--since", "1h")
	if lines := strings.Split(table, "\n"); len(lines) != 2 || !strings.HasPrefix(lines[0], "AT") ||
		!strings.Contains(lines[1], "dan") || !strings.Contains(lines[1], "approval.approve") || !strings.Contains(lines[1], plans[3]) {
		t.Fatalf("host audit --user dan:\n%s", table)
	}
	if out := cli("audit", "--user", "nobody"); out != "" {
		t.Fatalf("host audit --user nobody: %q", out)
	}
	if _, errOut, code := runNoKey(t, home, "--nats", url, "audit", "--since", "yesterday-ish"); code == 0 || !strings.Contains(errOut, "want a duration (24h, 30m) or a time") {
		t.Fatalf("a bad --since: %d %s", code, errOut)
	}
}

// sameEntries compares who, face, act and target of got with want (and the detail where want
// gives one): nothing more, nothing less, in order.
func sameEntries(t *testing.T, what string, got, want []audit.Entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d entries, want %d:\n%s", what, len(got), len(want), entriesText(got))
	}
	for i, w := range want {
		g := got[i]
		if g.Who != w.Who || g.Face != w.Face || g.Act != w.Act || g.Target != w.Target || g.Error != "" ||
			(w.Detail != "" && g.Detail != w.Detail) || time.Since(g.At) > 10*time.Minute {
			t.Errorf("%s: entry %d is %+v, want %+v", what, i, g, w)
		}
	}
}

func entriesText(es []audit.Entry) string {
	var b strings.Builder
	for _, e := range es {
		b.WriteString(e.Who + " " + e.Face + " " + e.Act + " " + e.Target + " " + e.Error + "\n")
	}
	return b.String()
}
