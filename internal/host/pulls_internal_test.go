package host

import (
	"testing"
)

// TestAdvisoryOf: the advisories that renew pulls name their kind and, for a consumer's, the
// consumer; anything shorter says nothing.
func TestAdvisoryOf(t *testing.T) {
	for _, c := range []struct{ subject, kind, consumer string }{
		{"$JS.EVENT.ADVISORY.STREAM.DELETED.AGENT_RUN", "DELETED", ""},
		{"$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.AGENT_RUN", "LEADER_ELECTED", ""},
		{"$JS.EVENT.ADVISORY.CONSUMER.DELETED.AGENT_RUN.fn_hello", "DELETED", "fn_hello"},
		{"$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.AGENT_RUN.fn_hello", "LEADER_ELECTED", "fn_hello"},
		{"$JS.EVENT.ADVISORY", "", ""},
	} {
		kind, consumer := advisoryOf(c.subject)
		if kind != c.kind || consumer != c.consumer {
			t.Errorf("advisoryOf(%q) = %q, %q; want %q, %q", c.subject, kind, consumer, c.kind, c.consumer)
		}
	}
}

// TestPullGenerationRenews: renewing ends the pulls waiting under the old generation, and only
// those.
func TestPullGenerationRenews(t *testing.T) {
	var g pullGeneration
	old := g.current()
	g.renew()
	if old.Err() == nil {
		t.Fatal("the old generation lives on after a renewal: its pulls would wait on")
	}
	if now := g.current(); now.Err() != nil || now == old {
		t.Fatal("no live generation after a renewal")
	}
}
