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
	}
	for _, c := range cases {
		if got := SubjectMatches(c.pat, c.subj); got != c.want {
			t.Errorf("SubjectMatches(%q, %q) = %v", c.pat, c.subj, got)
		}
	}
}

func TestValidSubject(t *testing.T) {
	for s, want := range map[string]bool{
		"a.b.c": true, "a.*.c": true, "a.>": true, "": false, "a..b": false, "a.>.b": false,
		"a b": false, "a.b*": false, "a.>x": false, ".a": false,
	} {
		if ValidSubject(s) != want {
			t.Errorf("ValidSubject(%q) = %v", s, !want)
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
		{nil, []string{}},
	}
	for _, c := range cases {
		if got := MergeSubjects(c.in); !slices.Equal(got, c.want) {
			t.Errorf("MergeSubjects(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}
