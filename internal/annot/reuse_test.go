package annot

import (
	"strings"
	"testing"
)

func TestReuse(t *testing.T) {
	spec, err := Parse("f.py", []byte("# sandbox\n# reuse: 100\n# volume: cache-$name cache\n"))
	if err != nil {
		t.Fatal(err)
	}
	if spec.Reuse != 100 {
		t.Fatalf("Reuse = %d, want 100", spec.Reuse)
	}
	if spec, err = Parse("f.py", []byte("# sandbox\n")); err != nil || spec.Reuse != 0 {
		t.Fatalf("no reuse: line: Reuse = %v, %v; want 0 (off is the default)", spec, err)
	}
	bad := []struct{ src, want string }{
		{"# sandbox\n# reuse: 10001\n", `"10001" is not a whole number from 0 to 10000`},
		{"# sandbox\n# reuse: -1\n", "is not a whole number"},
		{"# reuse: 5\n", `has none: add "sandbox"`},
		{"# sandbox\n# network: host\n# reuse: 5\n", "cannot be made safe with network: host"},
		{"# sandbox\n# volume: ws-$args[repo] ws\n# reuse: 5\n", "named from the arguments (line 2)"},
		{"# sandbox\n# reuse: 5\n# reuse: 6\n", "already"},
	}
	for _, c := range bad {
		_, err := Parse("f.py", []byte(c.src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", c.src, err, c.want)
		}
		if err != nil && !strings.Contains(err.Error(), "f.py:") {
			t.Errorf("Parse(%q) = %v: the error does not name its file:line", c.src, err)
		}
	}
	// The staged approve is refused too (the field is set by approve: ... stage).
	p := &parser{file: "f.py", spec: &Spec{Sandbox: true, Reuse: 3, Network: Network{Mode: NetworkProxy}, Approve: &Approve{Stage: true, Line: 4}},
		seen: map[string]int{"reuse": 2}}
	p.reuseSafe()
	if len(p.errs) != 1 || !strings.Contains(p.errs[0].Error(), "staged approve: (line 4)") {
		t.Fatalf("staged approve with reuse: errors %v, want one refusal naming line 4", p.errs)
	}
}
