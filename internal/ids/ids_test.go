package ids

import (
	"bytes"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agenthost/host/internal/bus"
)

func TestJobIDFor(t *testing.T) {
	k := NewKey(bytes.Repeat([]byte{7}, 32))
	base := k.JobID("", "AGENT_RUN", 7, 1000, "hello", "agent.run.hello")
	cases := []struct {
		name      string
		got, want string
		same      bool
	}{
		{"msg id is the job id", k.JobID("order-42", "AGENT_RUN", 7, 1000, "hello", "agent.run.hello"), "order-42", true},
		{"no msg id: stable for the same stream position", k.JobID("", "AGENT_RUN", 7, 1000, "hello", "agent.run.hello"), base, true},
		{"no msg id: another position differs", k.JobID("", "AGENT_RUN", 8, 1000, "hello", "agent.run.hello"), base, false},
		{"fan-out: each function its own id", k.JobID("order-42", "AGENT_RUN", 7, 1000, "audit", "orders.created"), "order-42", false},
	}
	for _, c := range cases {
		if (c.got == c.want) != c.same {
			t.Errorf("%s: %q vs %q", c.name, c.got, c.want)
		}
	}
	unsafe := k.JobID("a.b c>", "AGENT_RUN", 1, 1, "hello", "agent.run.hello")
	if !Safe.MatchString(unsafe) || unsafe != k.JobID("a.b c>", "AGENT_RUN", 2, 2, "hello", "agent.run.hello") {
		t.Errorf("unsafe msg id mapped to %q", unsafe)
	}
	if k.Next("j", "agent.run.a") == k.Next("j", "agent.run.b") || k.Next("j", "agent.run.a") != k.Next("j", "agent.run.a") {
		t.Error("next message ids must be stable per job and subject, distinct across subjects")
	}
}

// The ids a host derives for itself are the same on every host with the same host key (that is
// what deduplicates a tick across hosts) and unforeseeable without it (that is what keeps an
// outside publisher from taking them first).
func TestHostIDsNeedTheKey(t *testing.T) {
	key := bytes.Repeat([]byte{1}, 32)
	a, b, other := NewKey(key), NewKey(bytes.Clone(key)), NewKey(bytes.Repeat([]byte{2}, 32))
	tick := time.Unix(1_800_000_000, 0)
	for _, c := range []struct {
		name string
		id   func(Key) string
	}{
		{"tick", func(k Key) string { return k.Tick("report", tick) }},
		{"next step", func(k Key) string { return k.Next("job-1", "agent.run.step2") }},
		{"webhook delivery", func(k Key) string { return k.Hook("github", "72d3162e-cc78-11e3") }},
		{"fan-out job", func(k Key) string { return k.JobID("order-42", "AGENT_RUN", 1, 1, "audit", "orders.created") }},
	} {
		if c.id(a) != c.id(b) {
			t.Errorf("%s: two hosts with one key disagree: %s vs %s", c.name, c.id(a), c.id(b))
		}
		if c.id(a) == c.id(other) {
			t.Errorf("%s: another key gives the same id %s", c.name, c.id(a))
		}
		if !Safe.MatchString(c.id(a)) {
			t.Errorf("%s: id %q is not subject-safe", c.name, c.id(a))
		}
	}
	if a.Hook("github", "d1") == a.Hook("gitlab", "d1") {
		t.Error("one delivery id from two sources gives one message id")
	}
	if NewKey(nil).Derive("x") == NewKey(nil).Derive("x") {
		t.Error("without a host key, ids must still be unforeseeable (a random key)")
	}
}

func TestReplyToNeedsTheHostsSignature(t *testing.T) {
	k := NewKey(bytes.Repeat([]byte{3}, 32))
	hdr := func(kv ...string) nats.Header {
		h := nats.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	inbox := "_INBOX.abc.1"
	cases := []struct {
		name       string
		fn         string
		h          nats.Header
		want       string
		wantForged bool
	}{
		{"no Reply-To", "echo", hdr(bus.HeaderMsgID, "j1"), "", false},
		{"signed by a host", "echo", hdr(bus.HeaderMsgID, "j1", bus.HeaderReplyTo, inbox, bus.HeaderReplySig, k.ReplySig("echo", "j1", inbox)), inbox, false},
		{"unsigned", "echo", hdr(bus.HeaderMsgID, "j1", bus.HeaderReplyTo, "agent.run.victim"), "", true},
		{"signature of another inbox", "echo", hdr(bus.HeaderMsgID, "j1", bus.HeaderReplyTo, "$KV.agent_jobs.j1", bus.HeaderReplySig, k.ReplySig("echo", "j1", inbox)), "", true},
		{"signature for another function", "victim", hdr(bus.HeaderMsgID, "j1", bus.HeaderReplyTo, inbox, bus.HeaderReplySig, k.ReplySig("echo", "j1", inbox)), "", true},
		{"signature for another job", "echo", hdr(bus.HeaderMsgID, "j2", bus.HeaderReplyTo, inbox, bus.HeaderReplySig, k.ReplySig("echo", "j1", inbox)), "", true},
	}
	for _, c := range cases {
		got, forged := k.ReplyTo(c.fn, c.h)
		if got != c.want || forged != c.wantForged {
			t.Errorf("%s: replyTo = %q, forged %v; want %q, %v", c.name, got, forged, c.want, c.wantForged)
		}
	}
}

func TestNewIsUnguessable(t *testing.T) {
	a, b := New(), New()
	if len(a) != 20 || !Safe.MatchString(a) {
		t.Fatalf("job id %q: want 20 subject-safe characters", a)
	}
	// Ids made one after the other differ in (nearly) all of their last 12 characters: they
	// are random there, not a counter one could step (as xid's were: 1 or 2 differed).
	differ := 0
	for i := 8; i < 20; i++ {
		if a[i] != b[i] {
			differ++
		}
	}
	if differ < 7 {
		t.Fatalf("consecutive job ids %s and %s differ in %d of their last 12 characters: guessable", a, b, differ)
	}
}

// A start a host vouched for reads back as vouched only on the very message it was signed for:
// another message id, other bytes or another key make it a claim without a starter.
func TestVouchedStart(t *testing.T) {
	k := NewKey([]byte("host key"))
	signed := func(id, body string) *nats.Msg {
		m := nats.NewMsg("agent.run.plan")
		m.Data = []byte(body)
		m.Header.Set(bus.HeaderMsgID, id)
		if !Vouch(m, k.Derive, "user ada", "ada") {
			t.Fatal("Vouch signed nothing")
		}
		return m
	}
	m := signed("job-1", `{"a":1}`)
	if by, who, ok := k.Started(m.Header, m.Data); !ok || by != "user ada" || who != "ada" {
		t.Fatalf("the signed message: %q %q %v", by, who, ok)
	}
	moved := signed("job-1", `{"a":1}`)
	moved.Header.Set(bus.HeaderMsgID, "job-2")
	for what, c := range map[string]struct {
		m    *nats.Msg
		data string
		key  Key
	}{
		"another id":  {moved, `{"a":1}`, k},
		"other bytes": {m, `{"a":2}`, k},
		"another key": {m, `{"a":1}`, NewKey([]byte("other key"))},
	} {
		if by, who, ok := c.key.Started(c.m.Header, []byte(c.data)); ok || who != "" || by != "user ada" {
			t.Errorf("%s: %q %q %v, want the claim, no starter", what, by, who, ok)
		}
	}
	none := nats.NewMsg("agent.run.plan")
	if Vouch(none, k.Derive, "user ada", "ada") || none.Header.Get(bus.HeaderStartedBy) != "" {
		t.Error("a message without an id was vouched for")
	}
}
