package annot

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func TestExpand(t *testing.T) {
	var payload map[string]any
	if err := json.Unmarshal([]byte(`{
		"id": "user-42", "n": 42, "big": 1e21, "frac": 1.5, "tiny": 1e-7, "neg": -3,
		"ok": true, "no": false, "nul": null, "obj": {"a": {"b": "deep", "n": 7}}, "arr": [1, 2],
		"evil": "../../etc", "slash": "a/b", "empty": "", "long": "`+strings.Repeat("x", 300)+`",
		"space": "a b", "dot": ".hidden", "unicode": "café"
	}`), &payload); err != nil {
		t.Fatal(err)
	}
	vars := Vars{Workspace: "acme", Function: "summarize", Args: payload}

	cases := []struct {
		tmpl string
		vars *Vars // vars when nil
		want string
		err  string // part of the error when non-empty
	}{
		{tmpl: "claude", want: "claude"},
		{tmpl: "$workspace-$name", want: "acme-summarize"},
		{tmpl: "$name_v2", want: "summarize_v2"},
		{tmpl: "mem-$args[id]", want: "mem-user-42"},
		{tmpl: "$args[id]", want: "user-42"},
		{tmpl: "n$args[n]", want: "n42"},
		{tmpl: "n$args[big]", want: "n1000000000000000000000"},
		{tmpl: "n$args[frac]", want: "n1.5"},
		{tmpl: "n$args[tiny]", want: "n0.0000001"},
		{tmpl: "n$args[neg]", want: "n-3"},
		{tmpl: "$args[ok]", want: "true"},
		{tmpl: "x-$args[no]", want: "x-false"},
		{tmpl: "$args[obj.a.b]", want: "deep"},
		{tmpl: "$workspace.$args[obj.a.n]", want: "acme.7"},

		{tmpl: "$args[id]-mem", vars: &Vars{Args: map[string]any{"id": "../../etc"}},
			err: `volume name "$args[id]-mem" expands to "../../etc-mem", which is not a safe volume name (`},
		{tmpl: "$args[evil]", err: `expands to "../../etc", which is not a safe volume name`},
		{tmpl: "x$args[slash]", err: `expands to "xa/b"`},
		{tmpl: "$args[empty]", err: `expands to ""`},
		{tmpl: "$workspace", vars: &Vars{}, err: `expands to ""`},
		{tmpl: "$args[long]", err: "(300 bytes)"},
		{tmpl: "$args[space]", err: "not a safe volume name"},
		{tmpl: "$args[dot]", err: "not a safe volume name"},
		{tmpl: "$args[unicode]", err: "not a safe volume name"},
		{tmpl: "$args[n]-$args[neg]x", want: "42--3x"},
		{tmpl: "$args[id]", vars: &Vars{}, err: `volume name "$args[id]" needs argument "id", which the payload does not have`},
		{tmpl: "$args[missing]", err: `needs argument "missing", which the payload does not have`},
		{tmpl: "$args[obj.x]", err: `needs argument "obj.x", which the payload does not have`},
		{tmpl: "$args[id.x]", err: `needs argument "id.x", but "id" in the payload is a string, not an object`},
		{tmpl: "$args[obj.a.b.c]", err: `"obj.a.b" in the payload is a string`},
		{tmpl: "$args[obj]", err: `uses argument "obj", which is an object`},
		{tmpl: "$args[arr]", err: "which is an array"},
		{tmpl: "$args[nul]", err: "which is null"},
		{tmpl: "$nope", err: `unknown variable "$nope"`},
		{tmpl: "a/b", err: "contains '/'"},
	}
	for _, tc := range cases {
		t.Run(tc.tmpl, func(t *testing.T) {
			v := vars
			if tc.vars != nil {
				v = *tc.vars
			}
			got, err := Volume{Name: tc.tmpl, Path: "x"}.Expand(v)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Expand = %q, %v; want an error containing %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Expand = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestExpandNumberTypes(t *testing.T) {
	cases := []struct {
		val  any
		want string
		ok   bool
	}{
		{json.Number("42"), "42", true},
		{json.Number("123456789012345678901234567890"), "123456789012345678901234567890", true},
		{json.Number("1.50"), "1.5", true},
		{json.Number("1e3"), "1000", true},
		{json.Number("-2"), "-2", true},
		{json.Number("1e400"), "", false},
		{json.Number("abc"), "", false},
		{float64(7), "7", true},
		{math.Inf(1), "", false},
		{math.NaN(), "", false},
		{3, "3", true},
		{int64(-9), "-9", true},
		{[]string{"x"}, "", false},
	}
	for _, tc := range cases {
		got, ok := scalarString(tc.val)
		if got != tc.want || ok != tc.ok {
			t.Errorf("scalarString(%#v) = %q, %v; want %q, %v", tc.val, got, ok, tc.want, tc.ok)
		}
	}
	// Through Expand, with a decoder that keeps numbers as json.Number.
	d := json.NewDecoder(strings.NewReader(`{"id": 12345678901234567890}`))
	d.UseNumber()
	var args map[string]any
	if err := d.Decode(&args); err != nil {
		t.Fatal(err)
	}
	got, err := Volume{Name: "id-$args[id]"}.Expand(Vars{Args: args})
	if err != nil || got != "id-12345678901234567890" {
		t.Errorf("Expand with json.Number = %q, %v", got, err)
	}
}

func TestExpandLengthBoundary(t *testing.T) {
	v := Volume{Name: "$args[s]"}
	for _, tc := range []struct {
		n  int
		ok bool
	}{{1, false}, {2, true}, {255, true}, {256, false}, {300, false}} {
		_, err := v.Expand(Vars{Args: map[string]any{"s": strings.Repeat("a", tc.n)}})
		if (err == nil) != tc.ok {
			t.Errorf("%d-character name: err = %v, want ok = %v", tc.n, err, tc.ok)
		}
	}
}

func TestAbbrev(t *testing.T) {
	if got := abbrev("short"); got != "short" {
		t.Errorf("abbrev(short) = %q", got)
	}
	long := strings.Repeat("é", 100) // two bytes each: the cut must not split one
	got := abbrev(long)
	if !strings.HasSuffix(got, "... (200 bytes)") || !strings.HasPrefix(got, strings.Repeat("é", 32)) {
		t.Errorf("abbrev(long) = %q", got)
	}
}
