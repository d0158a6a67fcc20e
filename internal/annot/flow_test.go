package annot

import (
	"strings"
	"testing"
	"time"
)

func TestFlowControlAnnotations(t *testing.T) {
	s, err := Parse("edit.sh", []byte("# limit: 1 per args.repo\n# rate: 50/1m per args.api_key_name\necho\n"))
	if err != nil {
		t.Fatal(err)
	}
	if *s.Limit != (Limit{N: 1, Per: "args.repo", Line: 1}) || *s.Rate != (Rate{N: 50, Period: time.Minute, Per: "args.api_key_name", Line: 2}) {
		t.Fatalf("limit %+v rate %+v", *s.Limit, *s.Rate)
	}
	s, err = Parse("edit.sh", []byte("# limit: 3\n# rate: 5/s\necho\n"))
	if err != nil || s.Limit.N != 3 || s.Limit.Per != "" || s.Rate.Period != time.Second {
		t.Fatalf("limit %+v rate %+v: %v", s.Limit, s.Rate, err)
	}
}

func TestDebounceAnnotation(t *testing.T) {
	s, err := Parse("push.sh", []byte("# debounce: 2s by args.key\necho\n"))
	if err != nil || *s.Debounce != (Debounce{Wait: 2 * time.Second, By: "args.key", Line: 1}) {
		t.Fatalf("debounce %+v: %v", s.Debounce, err)
	}
	s, err = Parse("push.sh", []byte("# debounce: 168h\necho\n"))
	if err != nil || s.Debounce.Wait != MaxDebounce || s.Debounce.By != "" {
		t.Fatalf("debounce %+v: %v", s.Debounce, err)
	}
}

// TestFlowControlBadInput: every bad flow-control line is an error at its line that says how
// to write it.
func TestFlowControlBadInput(t *testing.T) {
	cases := []struct{ src, want string }{
		{"# limit: 0\n", `edit.sh:1: limit: "0" is not a whole number from 1 to 1000; write "limit: <n> [per <expr>]"`},
		{"# limit: -2\n", `"-2" is not a whole number from 1 to 1000`},
		{"# limit: 1 by args.repo\n", `after 1 comes "per <expr>" or nothing, not "by"`},
		{"# limit: 1 per\n", `has no expression after "per"`},
		{"# limit: 1\n# limit: 2 per args.repo\n", "edit.sh:2: limit: is already set on line 1; it may appear only once"},
		{"# rate: 0/1s\n", `"0" is not a whole number from 1 to 1000; write "rate: <n>/<duration> [per <expr>]"`},
		{"# rate: 5000/1s\n", `"5000" is not a whole number from 1 to 1000`},
		{"# rate: 5/100ms\n", "period 100ms is outside 1s to 24h"},
		{"# rate: 5/48h\n", "period 48h0m0s is outside 1s to 24h"},
		{"# rate: 5\n", `"5" has no "/" between the count and the period`},
		{"# rate: 5/soon\n", `period "soon" is not a Go duration`},
		{"# debounce: 8d\n", `"8d" is not a Go duration`},
		{"# debounce: 169h\n", "169h0m0s is outside 1ms to 7 days (168h)"},
		{"# debounce: 0s\n", "0s is outside 1ms to 7 days"},
		{"# debounce: 2s per args.key\n", `after 2s comes "by <expr>" or nothing, not "per"`},
		{"# debounce: 2s by\n", `has no expression after "by"`},
		{"# debounce: 1s\n# debounce: 2s\n", "edit.sh:2: debounce: is already set on line 1"},
		{"# priority:\n", `priority: needs a value: write "priority: <expr>"`},
		{"# priority: 1\n# priority: 2\n", "edit.sh:2: priority: is already set on line 1"},
	}
	for _, tc := range cases {
		_, err := Parse("edit.sh", []byte(tc.src+"echo\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want an error containing %q", tc.src, err, tc.want)
		}
	}
}
