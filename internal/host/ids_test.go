package host

import "testing"

func TestJobIDFor(t *testing.T) {
	base := jobIDFor("", "AGENT_RUN", 7, 1000, "hello", "agent.run.hello")
	cases := []struct {
		name      string
		got, want string
		same      bool
	}{
		{"msg id is the job id", jobIDFor("order-42", "AGENT_RUN", 7, 1000, "hello", "agent.run.hello"), "order-42", true},
		{"no msg id: stable for the same stream position", jobIDFor("", "AGENT_RUN", 7, 1000, "hello", "agent.run.hello"), base, true},
		{"no msg id: another position differs", jobIDFor("", "AGENT_RUN", 8, 1000, "hello", "agent.run.hello"), base, false},
		{"fan-out: each function its own id", jobIDFor("order-42", "AGENT_RUN", 7, 1000, "audit", "orders.created"), "order-42", false},
	}
	for _, c := range cases {
		if (c.got == c.want) != c.same {
			t.Errorf("%s: %q vs %q", c.name, c.got, c.want)
		}
	}
	unsafe := jobIDFor("a.b c>", "AGENT_RUN", 1, 1, "hello", "agent.run.hello")
	if !safeID.MatchString(unsafe) || unsafe != jobIDFor("a.b c>", "AGENT_RUN", 2, 2, "hello", "agent.run.hello") {
		t.Errorf("unsafe msg id mapped to %q", unsafe)
	}
	if nextMsgID("j", "agent.run.a") == nextMsgID("j", "agent.run.b") || nextMsgID("j", "agent.run.a") != nextMsgID("j", "agent.run.a") {
		t.Error("next message ids must be stable per job and subject, distinct across subjects")
	}
}
