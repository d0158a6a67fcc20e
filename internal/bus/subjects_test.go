package bus

import (
	"slices"
	"testing"
)

func TestSubjectMatches(t *testing.T) {
	cases := []struct {
		pat, subj string
		want      bool
	}{
		{"agent.run.>", "agent.run.hello", true},
		{"agent.run.>", "agent.run", false},
		{"agent.*.hello", "agent.run.hello", true},
		{"agent.*.hello", "agent.run.other", false},
		{"agent.run.hello", "agent.run.hello", true},
		{"agent.run.hello", "agent.run.hello.x", false},
		{"agent.error.>", "agent.error.a.b", true},
		{">", "x", true},
		{">", "x.y.z", true},
		{"agent.*", "agent", false},
		{"agent.*", "agent.run.hello", false},
		{"*.*", "a.b", true},
		{"a.b", "a.b.c", false},
		{"a.b.c", "a.b", false},
		// A subject with wildcards of its own matches a pattern only if the pattern covers
		// all it could be.
		{"a.>", "a.*", true},
		{"a.*", "a.>", false},
		{"a.b", "a.*", false},
		// Empty tokens never match, not even themselves.
		{"a..b", "a..b", false},
		{"a.*", "a.", false},
	}
	for _, c := range cases {
		if got := SubjectMatches(c.pat, c.subj); got != c.want {
			t.Errorf("SubjectMatches(%q, %q) = %v", c.pat, c.subj, got)
		}
	}
}

func TestValidSubject(t *testing.T) {
	cases := []struct {
		s    string
		want bool
	}{
		{"a.b.c", true},
		{"a.*.c", true},
		{"a.>", true},
		{">", true},
		{"*", true},
		{"*.*.>", true},
		{"$KV.agent_jobs.x", true},
		{"", false},
		// Empty tokens.
		{"a..b", false},
		{".a", false},
		{"a.", false},
		{".", false},
		// ">" only last.
		{"a.>.b", false},
		{">.a", false},
		{"a.>.>", false},
		// Wildcards only as whole tokens: the server would take these as literals.
		{"a.b*", false},
		{"a.*b", false},
		{"a.>x", false},
		{"a.x>", false},
		{"**", false},
		// White space.
		{"a b", false},
		{"a.\tb", false},
		{"a.b\n", false},
		{"a.\f", false},
	}
	for _, c := range cases {
		if got := ValidSubject(c.s); got != c.want {
			t.Errorf("ValidSubject(%q) = %v, want %v", c.s, got, c.want)
		}
	}
}

func TestMergeSubjects(t *testing.T) {
	cases := []struct{ in, want []string }{
		{[]string{"agent.run.>", "agent.run.hello", "webhook.>", "webhook.github"}, []string{"agent.run.>", "webhook.>"}},
		{[]string{"a.b", "a.b", "a.*"}, []string{"a.*"}},
		{[]string{"a.*.c", "a.b.c", "a.b.d"}, []string{"a.*.c", "a.b.d"}},
		{[]string{"orders.>", "orders.*"}, []string{"orders.>"}},
		{[]string{"x.*", "x.>"}, []string{"x.>"}},
		{[]string{"a.*.c", "a.b.>"}, []string{"a.*.c", "a.b.>"}}, // they overlap, but neither covers the other
		{[]string{">", "a.b", "x.*"}, []string{">"}},
		{[]string{"a.*.*", "a.>"}, []string{"a.>"}},
		{nil, []string{}},
	}
	for _, c := range cases {
		if got := MergeSubjects(c.in); !slices.Equal(got, c.want) {
			t.Errorf("MergeSubjects(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}
