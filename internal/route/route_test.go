package route

import (
	"errors"
	"strings"
	"testing"

	"github.com/agenthost/host/internal/annot"
)

func table(t *testing.T, next ...annot.Next) *Table {
	t.Helper()
	tab, err := Compile("f.py", next)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

func subjects(ms []Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Subject)
	}
	return out
}

func TestRouteBranches(t *testing.T) {
	tab := table(t,
		annot.Next{Subject: "always"},
		annot.Next{Subject: "high", If: "result.severity == 'high'"},
		annot.Next{Subject: "big", If: "result.count > 3 && args.env == 'prod'"},
		annot.Next{Subject: "other", Else: true},
	)
	for _, c := range []struct {
		result, args string
		want         string
	}{
		{`{"severity":"high","count":1}`, `{}`, "always,high"},
		{`{"severity":"high","count":5}`, `{"env":"prod"}`, "always,high,big"}, // every if that holds
		{`{"severity":"low","count":5}`, `{"env":"dev"}`, "always,other"},
		{`{"severity":"low","count":3}`, ``, "always,other"}, // 3 is not > 3; JSON's 3.0 compares with CEL's 3
	} {
		got, err := tab.Route([]byte(c.result), []byte(c.args))
		if err != nil {
			t.Fatalf("%s: %v", c.result, err)
		}
		if s := strings.Join(subjects(got), ","); s != c.want {
			t.Errorf("%s %s: routed to %s, want %s", c.result, c.args, s, c.want)
		}
		for _, m := range got {
			if string(m.Data) != c.result || m.Count != 0 {
				t.Errorf("%s: message %+v does not carry the result", c.result, m)
			}
		}
	}
}

func TestRouteMaps(t *testing.T) {
	tab := table(t, annot.Next{Subject: "file", Each: "result.files"}, annot.Next{Subject: "double", Each: "result.n.map(x, x * 2.0)"})
	got, err := tab.Route([]byte(`{"files":[{"path":"a.go"},"b.go",3,[1]],"n":[1,2]}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []Message{
		{"file", []byte(`{"path":"a.go"}`), 0, 4}, {"file", []byte(`{"item":"b.go"}`), 1, 4},
		{"file", []byte(`{"item":3}`), 2, 4}, {"file", []byte(`{"item":[1]}`), 3, 4},
		{"double", []byte(`{"item":2}`), 0, 2}, {"double", []byte(`{"item":4}`), 1, 2},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d messages: %+v", len(got), got)
	}
	for i := range want {
		if got[i].Subject != want[i].Subject || string(got[i].Data) != string(want[i].Data) || got[i].Index != want[i].Index || got[i].Count != want[i].Count {
			t.Errorf("message %d: %s %s %d/%d, want %s %s %d/%d", i, got[i].Subject, got[i].Data, got[i].Index, got[i].Count,
				want[i].Subject, want[i].Data, want[i].Index, want[i].Count)
		}
	}
	if got, err := tab.Route([]byte(`{"files":[],"n":[]}`), nil); err != nil || len(got) != 0 {
		t.Errorf("empty lists: %v, %v", got, err)
	}
}

// Bad input, at load and at run time: every error names the edge and the expression.
func TestRouteRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		next annot.Next
		want string
	}{
		{"syntax", annot.Next{Subject: "s", If: "result.x ==", Line: 4}, "f.py:4: next: s if result.x =="},
		{"unknown variable", annot.Next{Subject: "s", If: "resutl.x", Line: 2}, "undeclared reference to 'resutl'"},
		{"if not a condition", annot.Next{Subject: "s", If: "'a' + 'b'", Line: 1}, "it gives string"},
		{"each not a list", annot.Next{Subject: "s", Each: "1 + 2", Line: 1}, "it gives int"},
	} {
		_, err := Compile("f.py", []annot.Next{c.next})
		var ae *annot.Error
		if err == nil || !errors.As(err, &ae) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an annot.Error with %q", c.name, err, c.want)
		}
	}
	tab := table(t, annot.Next{Subject: "s", If: "result.ok"})
	if _, err := tab.Route([]byte(`{"ok":"yes"}`), nil); err == nil || !strings.Contains(err.Error(), "next: s if result.ok: it gave string yes, not true or false") {
		t.Errorf("a condition that is a string: %v", err)
	}
	if _, err := tab.Route([]byte(`{}`), nil); err == nil || !strings.Contains(err.Error(), "no such key: ok") {
		t.Errorf("a field the result lacks: %v", err)
	}
	each := table(t, annot.Next{Subject: "s", Each: "result.files"})
	if _, err := each.Route([]byte(`{"files":"a.go"}`), nil); err == nil || !strings.Contains(err.Error(), "not a list") {
		t.Errorf("each over a string: %v", err)
	}
	big := `{"files":[` + strings.Repeat(`1,`, MaxItems) + `1]}`
	if _, err := each.Route([]byte(big), nil); err == nil || !strings.Contains(err.Error(), "10001 items, more than the 10000") {
		t.Errorf("a map over 10,001 items: %v", err)
	}
	if got, err := each.Route([]byte(`{"files":[`+strings.Repeat(`1,`, MaxItems-1)+`1]}`), nil); err != nil || len(got) != MaxItems {
		t.Errorf("a map over exactly %d items: %d, %v", MaxItems, len(got), err)
	}
	var none *Table
	if got, err := none.Route([]byte(`1`), nil); got != nil || err != nil {
		t.Errorf("no edges routed %v, %v", got, err)
	}
}

// TestKey: a flow-control key is the expression's value as text; one that fails on a message's
// arguments says so, naming the annotation and the expression.
func TestKey(t *testing.T) {
	k, err := CompileKey("edit.sh", 1, "limit: 1 per", "args.repo")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := k.Eval([]byte(`{"repo":"acme/api"}`)); err != nil || got != "acme/api" {
		t.Fatalf("key %q, %v", got, err)
	}
	if _, err := k.Eval([]byte(`{}`)); err == nil || !strings.Contains(err.Error(), "limit: 1 per args.repo: no such key: repo") {
		t.Fatalf("missing argument: %v", err)
	}
	n, _ := CompileKey("edit.sh", 1, "limit: 1 per", "args.n")
	if got, _ := n.Eval([]byte(`{"n":3}`)); got != "3" {
		t.Fatalf("a number's key %q; want 3", got)
	}
	if got, _ := (*Key)(nil).Eval([]byte(`{}`)); got != "" {
		t.Fatalf("no expression: key %q", got)
	}
}
