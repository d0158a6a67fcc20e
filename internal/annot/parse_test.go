package annot

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// wantErr is one expected *Error: its line and a part of its message.
type wantErr struct {
	line int
	msg  string
}

// spec returns the Spec of a script without annotations, changed by edit.
func spec(edit func(*Spec)) *Spec {
	s := &Spec{Network: Network{Mode: NetworkProxy}}
	if edit != nil {
		edit(s)
	}
	return s
}

// annotErrors unwraps what Parse returned into its *Error values.
func annotErrors(t *testing.T, err error) []*Error {
	t.Helper()
	if err == nil {
		return nil
	}
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("error is not a join: %T %v", err, err)
	}
	var out []*Error
	for _, e := range joined.Unwrap() {
		var ae *Error
		if !errors.As(e, &ae) {
			t.Fatalf("joined error is not an *Error: %T %v", e, e)
		}
		out = append(out, ae)
	}
	return out
}

type parseCase struct {
	name string
	file string // "fn.py" when empty
	src  string
	want *Spec // checked when errs is empty
	errs []wantErr
}

func runParseCases(t *testing.T, cases []parseCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			file := tc.file
			if file == "" {
				file = "fn.py"
			}
			got, err := Parse(file, []byte(tc.src))
			errs := annotErrors(t, err)
			if len(tc.errs) == 0 {
				if err != nil {
					t.Fatalf("Parse: unexpected error:\n%v", err)
				}
				if !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("Parse:\n got %+v\nwant %+v", got, tc.want)
				}
				return
			}
			if got != nil {
				t.Errorf("Parse returned a Spec along with errors: %+v", got)
			}
			if len(errs) != len(tc.errs) {
				t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(tc.errs), err)
			}
			for i, w := range tc.errs {
				e := errs[i]
				if e.File != file || e.Line != w.line || !strings.Contains(e.Msg, w.msg) {
					t.Errorf("error %d = %q (file %q line %d), want file %q line %d containing %q",
						i, e.Msg, e.File, e.Line, file, w.line, w.msg)
				}
			}
		})
	}
}

func TestParseExamples(t *testing.T) {
	runParseCases(t, []parseCase{
		{
			name: "typescript example",
			file: "functions/agent/main.ts",
			src: "// sandbox\n// volume: claude .claude\n\n" +
				"// path -> content, fileset resource, that contains your CLAUDE.md, and skills\n" +
				"type AgentInstructions = Record<string, string>\n" +
				"// volume: late .late\n",
			want: spec(func(s *Spec) {
				s.Sandbox = true
				s.Volumes = []Volume{{Name: "claude", Path: ".claude", Line: 2}}
			}),
		},
		{
			name: "python example",
			file: "functions/memory.py",
			src:  "# sandbox\n# volume: agent-memory memory\n\nimport json, os\n# timeout: bad\n",
			want: spec(func(s *Spec) {
				s.Sandbox = true
				s.Volumes = []Volume{{Name: "agent-memory", Path: "memory", Line: 2}}
			}),
		},
		{
			name: "everything",
			file: "functions/all.js",
			src: `#!/usr/bin/env node
// sandbox
// volume: $workspace-$name data
// volume: cache-$args[user.id] cache/x/
// on: orders.*.created
// on: billing.>
// next: agent.run.summarize
// next: agent.run.notify
// timeout: 1m30s
// memory: 512Mi
// network: proxy api.example.com *.github.com:443 API.Other.io
// env: MODE=fast
// env: TOKEN=$secret:github/token
// env: EMPTY=
// retries: 3
// concurrency: 4
// schedule: */5 * * * *
console.log("hi")
`,
			want: &Spec{
				Sandbox: true,
				Volumes: []Volume{
					{Name: "$workspace-$name", Path: "data", Line: 3},
					{Name: "cache-$args[user.id]", Path: "cache/x", Line: 4},
				},
				On:      []string{"orders.*.created", "billing.>"},
				Next:    []Next{{Subject: "agent.run.summarize", Line: 7}, {Subject: "agent.run.notify", Line: 8}},
				Timeout: 90 * time.Second,
				Memory:  512 << 20,
				Network: Network{Mode: NetworkProxy, Hosts: []string{"api.example.com", "*.github.com:443", "api.other.io"}},
				Env: []Env{
					{Name: "MODE", Value: "fast", Line: 12},
					{Name: "TOKEN", Value: "$secret:github/token", Secret: "github/token", Line: 13},
					{Name: "EMPTY", Value: "", Line: 14},
				},
				Retries:     3,
				Concurrency: 4,
				Schedule:    "*/5 * * * *",
			},
		},
		{name: "empty file", src: "", want: spec(nil)},
		{name: "no comments", src: "import os\n# sandbox\n", want: spec(nil)},
	})
}

func TestParseBlock(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "shebang skipped", file: "x.sh", src: "#!/usr/bin/env bash\n# sandbox\n", want: spec(func(s *Spec) { s.Sandbox = true })},
		{name: "shebang in js", file: "x.mjs", src: "#!/usr/bin/env node\n// sandbox\n", want: spec(func(s *Spec) { s.Sandbox = true })},
		{name: "shebang only on line 1", file: "x.ts", src: "// sandbox\n#!/bin/sh\n// retries: 1\n", want: spec(func(s *Spec) { s.Sandbox = true })},
		{name: "no space after prefix", file: "x.ts", src: "//sandbox\n//timeout:5s\n", want: spec(func(s *Spec) { s.Sandbox = true; s.Timeout = 5 * time.Second })},
		{name: "hash no space", src: "#sandbox\n", want: spec(func(s *Spec) { s.Sandbox = true })},
		{name: "blank lines and indentation", src: "\n\n   \n  # sandbox\n\t\n#   retries: 2   \n", want: spec(func(s *Spec) { s.Sandbox = true; s.Retries = 2 })},
		{name: "CRLF", src: "# sandbox\r\n# retries: 2\r\n\r\nprint(1)\r\n# retries: 3\r\n", want: spec(func(s *Spec) { s.Sandbox = true; s.Retries = 2 })},
		{name: "lone CR ends a line", src: "# sandbox\rimport os\r# retries: 2\r", want: spec(func(s *Spec) { s.Sandbox = true })},
		{name: "BOM", file: "x.ts", src: "\ufeff// sandbox\n", want: spec(func(s *Spec) { s.Sandbox = true })},
		{name: "block comment ends block", file: "x.ts", src: "// sandbox\n/* retries: 2 */\n// retries: 3\n", want: spec(func(s *Spec) { s.Sandbox = true })},
		{name: "hash is code in ts", file: "x.ts", src: "# sandbox\n// retries: 2\n", want: spec(nil)},
		{name: "slashes are code in python", src: "// sandbox\n# retries: 2\n", want: spec(nil)},
		{name: "unknown extension uses hash", file: "x.rb", src: "# sandbox\n", want: spec(func(s *Spec) { s.Sandbox = true })},
		{name: "no extension uses hash", file: "functions/run", src: "# sandbox\n", want: spec(func(s *Spec) { s.Sandbox = true })},
		{name: "upper-case extension", file: "x.TS", src: "// sandbox\n", want: spec(func(s *Spec) { s.Sandbox = true })},
		{name: "tsx cjs", file: "x.cjs", src: "// retries: 1\n", want: spec(func(s *Spec) { s.Retries = 1 })},
		{name: "errors after block are not reported", src: "x = 1\n# volum: a b\n", want: spec(nil)},
		{name: "line numbers count shebang and blanks", file: "x.sh", src: "#!/bin/sh\n\n# retries: x\n", errs: []wantErr{{3, "retries:"}}},
	})
}

func TestParseOrdinaryComments(t *testing.T) {
	var src strings.Builder
	for _, c := range []string{
		"-*- coding: utf-8 -*-",
		"type: ignore",
		"noqa: E501",
		"TODO: fix",
		"Note: this runs nightly",
		"Copyright 2024 Example Inc.",
		"pylint: disable=invalid-name",
		"mypy: ignore-errors",
		"fmt: off",
		"flake8: noqa",
		"vim: set ft=python",
		"author: someone",
		"usage: fn.py <input>",
		"https://example.com/docs",
		"see: https://example.com",
		"Description",
		"hello",
		"sand",
		"path -> content, fileset resource, that contains your CLAUDE.md, and skills",
		"sandboxing is described in the docs",
		"volume claude .claude is mounted above",
		"on the other hand",
		"next we do things",
		"",
		"#",
		"# nested hash",
		"!important",
		"Volum: capitalised typos are prose",
	} {
		src.WriteString("# " + c + "\n")
	}
	runParseCases(t, []parseCase{
		{name: "python", src: src.String(), want: spec(nil)},
		{name: "ts", file: "x.ts", src: strings.ReplaceAll(src.String(), "# ", "// "), want: spec(nil)},
		{name: "triple slash directive", file: "x.ts", src: "/// <reference types=\"node\" />\n// @ts-nocheck\n// sandbox\n", want: spec(func(s *Spec) { s.Sandbox = true })},
	})
}

func TestParseTypos(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "volum", src: "# volum: a b\n", errs: []wantErr{{1, `unknown annotation "volum:" (did you mean "volume:"?)`}}},
		{name: "sandboxx", src: "# sandboxx\n", errs: []wantErr{{1, `unknown annotation "sandboxx" (did you mean "sandbox"?)`}}},
		{name: "sanbox", src: "# sanbox\n", errs: []wantErr{{1, `did you mean "sandbox"?`}}},
		{name: "sandbxo transposed", src: "# sandbxo\n", errs: []wantErr{{1, `did you mean "sandbox"?`}}},
		{name: "capital typo of sandbox", src: "# Sanbox\n", errs: []wantErr{{1, `did you mean "sandbox"?`}}},
		{name: "sandbx colon", src: "# sandbx: yes\n", errs: []wantErr{{1, `(did you mean "sandbox"?)`}}},
		{name: "retires", src: "# retires: 3\n", errs: []wantErr{{1, `did you mean "retries:"?`}}},
		{name: "timout", src: "# timout: 3s\n", errs: []wantErr{{1, `did you mean "timeout:"?`}}},
		{name: "tiemout", src: "# tiemout: 3s\n", errs: []wantErr{{1, `did you mean "timeout:"?`}}},
		{name: "memroy", src: "# memroy: 1Gi\n", errs: []wantErr{{1, `did you mean "memory:"?`}}},
		{name: "netwrk", src: "# netwrk: none\n", errs: []wantErr{{1, `did you mean "network:"?`}}},
		{name: "concurency", src: "# concurency: 2\n", errs: []wantErr{{1, `did you mean "concurrency:"?`}}},
		{name: "schedual", src: "# schedual: @hourly\n", errs: []wantErr{{1, `did you mean "schedule:"?`}}},
		{name: "volumes plural", src: "# volumes: a b\n", errs: []wantErr{{1, `did you mean "volume:"?`}}},
		{name: "nxet", src: "# nxet: a.b\n", errs: []wantErr{{1, `did you mean "next:"?`}}},
		{name: "nex", src: "# nex: a.b\n", errs: []wantErr{{1, `did you mean "next:"?`}}},
		{name: "evn", src: "# evn: A=b\n", errs: []wantErr{{1, `did you mean "env:"?`}}},
		{name: "envs", src: "# envs: A=b\n", errs: []wantErr{{1, `did you mean "env:"?`}}},
		{name: "onn", src: "# onn: a.b\n", errs: []wantErr{{1, `did you mean "on:"?`}}},
		// "one:" is one letter from "on:"; the contract prefers an error
		// the user can fix by rewording over a trigger silently lost.
		{name: "one is too close to on", src: "# one: two\n", errs: []wantErr{{1, `did you mean "on:"?`}}},
		// The same rule catches a few real words; these are the known
		// casualties, kept here so a change to the rule is deliberate.
		{name: "in is too close to on", src: "# in: short\n", errs: []wantErr{{1, `did you mean "on:"?`}}},
		{name: "text is too close to next", src: "# text: hi\n", errs: []wantErr{{1, `did you mean "next:"?`}}},
		{name: "value is too close to volume", src: "# value: 3\n", errs: []wantErr{{1, `did you mean "volume:"?`}}},
		// Distance 2 from a short key is not a typo: "nets", "exit" etc.
		{name: "two from next is prose", src: "# nets: a\n# exit: code 1\n# env2: x\n", want: spec(nil)},
		{name: "three from timeout is prose", src: "# timing: a\n", want: spec(nil)},
		{name: "Sandbox capitalised", src: "# Sandbox\n", errs: []wantErr{{1, `annotations are lower case: write "sandbox", not "Sandbox"`}}},
		{name: "SANDBOX", src: "# SANDBOX\n", errs: []wantErr{{1, `lower case`}}},
		{name: "Volume capitalised", src: "# Volume: a b\n", errs: []wantErr{{1, `annotations are lower case: write "volume:", not "Volume:"`}}},
		{name: "Next capitalised", src: "# Next: a.b\n", errs: []wantErr{{1, `lower case`}}},
		{name: "bare key without value", src: "# timeout\n", errs: []wantErr{{1, `"timeout" needs a value`}}},
		{name: "sandbox with trailing words", src: "# sandbox please\n", errs: []wantErr{{1, `"sandbox" takes no value`}}},
		{name: "sandbox with colon", src: "# sandbox: true\n", errs: []wantErr{{1, `"sandbox:" takes no value`}}},
		{name: "sandbox with empty colon", src: "# sandbox:\n", errs: []wantErr{{1, `takes no value`}}},
	})
}

func TestParseSingleValued(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "sandbox twice", src: "# sandbox\n# sandbox\n", errs: []wantErr{{2, "sandbox is already set on line 1"}}},
		{name: "timeout twice", src: "# timeout: 1s\n\n# timeout: 2s\n", errs: []wantErr{{3, "timeout: is already set on line 1"}}},
		{name: "all twice", src: "# memory: 1Gi\n# network: none\n# retries: 1\n# concurrency: 1\n# schedule: @daily\n" +
			"# memory: 1Gi\n# network: none\n# retries: 1\n# concurrency: 1\n# schedule: @daily\n",
			errs: []wantErr{{6, "memory: is already set on line 1"}, {7, "network: is already set on line 2"}, {8, "retries: is already set on line 3"}, {9, "concurrency: is already set on line 4"}, {10, "schedule: is already set on line 5"}}},
		{name: "empty values", src: "# timeout:\n# on:   \n# volume:\n", errs: []wantErr{{1, "timeout: needs a value"}, {2, "on: needs a value"}, {3, "volume: needs a value"}}},
	})
}

func TestParseVolumes(t *testing.T) {
	many := ""
	for i := range 11 {
		many += "# volume: v" + string(rune('a'+i)) + " d" + string(rune('a'+i)) + "\n"
	}
	ten := strings.Join(strings.SplitAfter(many, "\n")[:10], "")
	runParseCases(t, []parseCase{
		{name: "clean path", src: "# volume: ab ./x//y/\n", want: spec(func(s *Spec) { s.Volumes = []Volume{{Name: "ab", Path: "x/y", Line: 1}} })},
		{name: "ten", src: ten, want: func() *Spec {
			s, err := Parse("fn.py", []byte(ten))
			if err != nil || len(s.Volumes) != 10 {
				t.Fatalf("ten volumes: %v %v", s, err)
			}
			return s
		}()},
		{name: "eleven", src: many, errs: []wantErr{{11, "too many volumes; at most 10"}}},
		{name: "one field", src: "# volume: data\n", errs: []wantErr{{1, "expected a name and a path"}}},
		{name: "three fields", src: "# volume: a b c\n", errs: []wantErr{{1, "expected a name and a path"}}},
		{name: "absolute", src: "# volume: ab /data\n", errs: []wantErr{{1, `path "/data" is absolute`}}},
		{name: "dotdot", src: "# volume: ab ../x\n", errs: []wantErr{{1, `contains ".."`}}},
		{name: "inner dotdot", src: "# volume: ab x/../y\n", errs: []wantErr{{1, `contains ".."`}}},
		{name: "dot", src: "# volume: ab .\n", errs: []wantErr{{1, "job directory itself"}}},
		{name: "dot slash", src: "# volume: ab ./\n", errs: []wantErr{{1, "job directory itself"}}},
		{name: "same path", src: "# volume: ab x\n# volume: cd ./x\n", errs: []wantErr{{2, `path "x" is already used by the volume on line 1`}}},
		{name: "nested below", src: "# volume: ab x\n# volume: cd x/y\n", errs: []wantErr{{2, `"x/y" is inside "x", the volume on line 1`}}},
		{name: "nested above", src: "# volume: ab x/y\n# volume: cd x\n", errs: []wantErr{{2, `"x" contains "x/y"`}}},
		{name: "siblings with shared prefix", src: "# volume: ab x\n# volume: cd xy\n", want: spec(func(s *Spec) {
			s.Volumes = []Volume{{Name: "ab", Path: "x", Line: 1}, {Name: "cd", Path: "xy", Line: 2}}
		})},
		{name: "same name different paths", src: "# volume: ab x\n# volume: ab y\n", want: spec(func(s *Spec) {
			s.Volumes = []Volume{{Name: "ab", Path: "x", Line: 1}, {Name: "ab", Path: "y", Line: 2}}
		})},
		{name: "literal name too short", src: "# volume: a x\n", errs: []wantErr{{1, `volume name "a" is not a safe volume name`}}},
		{name: "literal name leading dot", src: "# volume: .a x\n", errs: []wantErr{{1, "not a safe volume name"}}},
		{name: "literal name dotdot", src: "# volume: .. x\n", errs: []wantErr{{1, "not a safe volume name"}}},
		{name: "literal name too long", src: "# volume: " + strings.Repeat("a", 256) + " x\n", errs: []wantErr{{1, "not a safe volume name"}}},
		{name: "literal name 255", src: "# volume: " + strings.Repeat("a", 255) + " x\n", want: spec(func(s *Spec) {
			s.Volumes = []Volume{{Name: strings.Repeat("a", 255), Path: "x", Line: 1}}
		})},
		{name: "slash in name", src: "# volume: a/b x\n", errs: []wantErr{{1, `contains '/'`}}},
		{name: "unknown variable", src: "# volume: $user x\n", errs: []wantErr{{1, `unknown variable "$user"`}}},
		{name: "braced variable", src: "# volume: ${name} x\n", errs: []wantErr{{1, `"$" that is not followed by a variable`}}},
		{name: "args without key", src: "# volume: $args x\n", errs: []wantErr{{1, "$args without a key"}}},
		{name: "args unclosed", src: "# volume: $args[id x\n", errs: []wantErr{{1, "$args without a key"}}},
		{name: "args empty key", src: "# volume: $args[] x\n", errs: []wantErr{{1, `bad argument key ""`}}},
		{name: "args empty segment", src: "# volume: $args[a..b] x\n", errs: []wantErr{{1, `bad argument key "a..b"`}}},
		{name: "args bad char", src: "# volume: $args[a/b] x\n", errs: []wantErr{{1, `bad argument key "a/b"`}}},
		{name: "variable name never safe", src: "# volume: -$name x\n", errs: []wantErr{{1, "can never expand to a safe volume name"}}},
		{name: "variable name trailing dot", src: "# volume: $name. x\n", errs: []wantErr{{1, "can never expand"}}},
		{name: "variable name literal too long", src: "# volume: $name-" + strings.Repeat("a", 255) + " x\n", errs: []wantErr{{1, "can never expand"}}},
		{name: "variables", src: "# volume: $workspace_$name.$args[a-b.c_d]-v2 x\n", want: spec(func(s *Spec) {
			s.Volumes = []Volume{{Name: "$workspace_$name.$args[a-b.c_d]-v2", Path: "x", Line: 1}}
		})},
		{name: "bad name and bad path both reported", src: "# volume: a/b /x\n", errs: []wantErr{{1, "contains '/'"}, {1, "is absolute"}}},
		{name: "overlap with a volume whose name was bad", src: "# volume: a/b x\n# volume: ok x\n", errs: []wantErr{{1, "contains '/'"}, {2, "already used by the volume on line 1"}}},
	})
}

func TestParseSubjects(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "on wildcards", src: "# on: a.*.c\n# on: a.>\n# on: *\n# on: >\n", want: spec(func(s *Spec) { s.On = []string{"a.*.c", "a.>", "*", ">"} })},
		{name: "on odd chars", src: "# on: a-b_c.d$e\n", want: spec(func(s *Spec) { s.On = []string{"a-b_c.d$e"} })},
		{name: "on and next same subject", src: "# on: a.b\n# next: a.b\n", want: spec(func(s *Spec) { s.On = []string{"a.b"}; s.Next = []Next{{Subject: "a.b", Line: 2}} })},
		{name: "on space", src: "# on: a b\n", errs: []wantErr{{1, "contains whitespace"}}},
		{name: "on leading dot", src: "# on: .a\n", errs: []wantErr{{1, "empty token"}}},
		{name: "on trailing dot", src: "# on: a.\n", errs: []wantErr{{1, "empty token"}}},
		{name: "on double dot", src: "# on: a..b\n", errs: []wantErr{{1, "empty token"}}},
		{name: "on > not last", src: "# on: a.>.b\n", errs: []wantErr{{1, `">" before the last token`}}},
		{name: "on partial wildcard", src: "# on: a.b*\n", errs: []wantErr{{1, "inside a token"}}},
		{name: "on partial gt", src: "# on: a.>b\n", errs: []wantErr{{1, "inside a token"}}},
		{name: "on duplicate", src: "# on: a.b\n# on: a.b\n", errs: []wantErr{{2, `on: "a.b" is already given on line 1`}}},
		{name: "next wildcard", src: "# next: a.*\n", errs: []wantErr{{1, "has a wildcard"}}},
		{name: "next gt", src: "# next: a.>\n", errs: []wantErr{{1, "has a wildcard"}}},
		{name: "next duplicate", src: "# next: a.b\n# next: a.b\n", errs: []wantErr{{2, `next: "a.b" is already given on line 1`}}},
		{name: "next control char", src: "# next: a.\x01b\n", errs: []wantErr{{1, "control character"}}},
		{name: "next if", src: "# next: a.high if result.severity == 'high'\n# next: a.low else\n# next: a.each each result.files\n",
			want: spec(func(s *Spec) {
				s.Next = []Next{{Subject: "a.high", If: "result.severity == 'high'", Line: 1}, {Subject: "a.low", Else: true, Line: 2},
					{Subject: "a.each", Each: "result.files", Line: 3}}
			})},
		{name: "next one subject, two conditions", src: "# next: a.b if result.x\n# next: a.b if result.y\n",
			want: spec(func(s *Spec) {
				s.Next = []Next{{Subject: "a.b", If: "result.x", Line: 1}, {Subject: "a.b", If: "result.y", Line: 2}}
			})},
		{name: "next if without expression", src: "# next: a.b if\n", errs: []wantErr{{1, `no expression after "if"`}}},
		{name: "next each without expression", src: "# next: a.b each  \n", errs: []wantErr{{1, `no expression after "each"`}}},
		{name: "next unknown word", src: "# next: a.b when result.x\n", errs: []wantErr{{1, `not "when"`}}},
		{name: "next else with words", src: "# next: a.b if x\n# next: a.c else x\n", errs: []wantErr{{2, `not "else"`}}},
		{name: "next else without if", src: "# next: a.b\n# next: a.c else\n", errs: []wantErr{{2, "no \"next: <subject> if <expr>\" for it to be the else of"}}},
		{name: "next same if twice", src: "# next: a.b if x\n# next: a.b if x\n", errs: []wantErr{{2, "already given on line 1"}}},
	})
}

func TestParseScalars(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "timeout", src: "# timeout: 250ms\n", want: spec(func(s *Spec) { s.Timeout = 250 * time.Millisecond })},
		{name: "delay", src: "# delay: 1h\n", want: spec(func(s *Spec) { s.Delay = time.Hour })},
		{name: "join", src: "# join: summary file-check\n# join-timeout: 30m\n", want: spec(func(s *Spec) {
			s.Join, s.JoinTimeout = []string{"summary", "file-check"}, 30*time.Minute
		})},
		{name: "approve", src: "# approve\n", want: spec(func(s *Spec) { s.Approve = &Approve{Timeout: DefaultApproveTimeout, Line: 1} })},
		{name: "approve: empty", src: "# approve:\n", want: spec(func(s *Spec) { s.Approve = &Approve{Timeout: DefaultApproveTimeout, Line: 1} })},
		{name: "approve timeout", src: "# approve: timeout 2h\n", want: spec(func(s *Spec) { s.Approve = &Approve{Timeout: 2 * time.Hour, Line: 1} })},
		{name: "approve timeout by groups", src: "# x\n# approve: timeout 4h by ops, security\n", want: spec(func(s *Spec) {
			s.Approve = &Approve{Timeout: 4 * time.Hour, Groups: []string{"ops", "security"}, Line: 2}
		})},
		{name: "approve by alone", src: "# approve: by ops\n", want: spec(func(s *Spec) {
			s.Approve = &Approve{Timeout: DefaultApproveTimeout, Groups: []string{"ops"}, Line: 1}
		})},
		{name: "approve bad", src: "# approve: soon\n", errs: []wantErr{{1, `it takes nothing, "timeout <duration>", "by <group>[,<group>]", or both in that order`}}},
		{name: "approve by before timeout", src: "# approve: by ops timeout 2h\n", errs: []wantErr{{1, `"timeout <duration>" comes before "by"`}}},
		{name: "approve stage", src: "# volume: repo repo\n# approve: stage\n", want: spec(func(s *Spec) {
			s.Volumes = []Volume{{Name: "repo", Path: "repo", Line: 1}}
			s.Approve = &Approve{Timeout: DefaultApproveTimeout, Stage: true, Line: 2}
		})},
		{name: "approve timeout stage", src: "# volume: repo repo\n# approve: timeout 4h stage\n", want: spec(func(s *Spec) {
			s.Volumes = []Volume{{Name: "repo", Path: "repo", Line: 1}}
			s.Approve = &Approve{Timeout: 4 * time.Hour, Stage: true, Line: 2}
		})},
		{name: "approve timeout by stage", src: "# volume: repo repo\n# approve: timeout 1h by ops stage\n", want: spec(func(s *Spec) {
			s.Volumes = []Volume{{Name: "repo", Path: "repo", Line: 1}}
			s.Approve = &Approve{Timeout: time.Hour, Groups: []string{"ops"}, Stage: true, Line: 2}
		})},
		{name: "approve group called stage", src: "# approve: by ops, stage\n", want: spec(func(s *Spec) {
			s.Approve = &Approve{Timeout: DefaultApproveTimeout, Groups: []string{"ops", "stage"}, Line: 1}
		})},
		{name: "approve stage twice", src: "# volume: repo repo\n# approve: stage timeout 1h stage\n", errs: []wantErr{{2, `"stage" is given twice`}}},
		{name: "approve stage without volume", src: "# approve: timeout 1h stage\n", errs: []wantErr{{1, `this function has no volume: line`}}},
		{name: "approve too long", src: "# approve: timeout 200h\n", errs: []wantErr{{1, "longer than 7 days"}}},
		{name: "approve by nothing", src: "# approve: timeout 1h by\n", errs: []wantErr{{1, `"by" names no group`}}},
		{name: "approve by nothing, spaces", src: "# approve: by   \n", errs: []wantErr{{1, `"by" names no group`}}},
		{name: "approve by bad group", src: "# approve: by ops,sec.team\n", errs: []wantErr{{1, `group "sec.team" is not a group name`}}},
		{name: "approve by empty group", src: "# approve: by ops,,sec\n", errs: []wantErr{{1, "an empty group name between commas"}}},
		{name: "approve by group twice", src: "# approve: by ops,ops\n", errs: []wantErr{{1, "names group ops twice"}}},
		{name: "approve by spaces", src: "# approve: by ops security\n", errs: []wantErr{{1, `separate groups with commas, as in "by ops,security"`}}},
		{name: "join bad name", src: "# join: Summary\n", errs: []wantErr{{1, `"Summary" is not a function name`}}},
		{name: "join twice the same", src: "# join: a a\n", errs: []wantErr{{1, "names a twice"}}},
		{name: "join-timeout without join", src: "# join-timeout: 5m\n", errs: []wantErr{{1, "no join: line"}}},
		{name: "delay zero", src: "# delay: 0s\n", errs: []wantErr{{1, "must be longer than zero"}}},
		{name: "delay too long", src: "# delay: 169h\n", errs: []wantErr{{1, "longer than 7 days"}}},
		{name: "delay not a duration", src: "# delay: soon\n", errs: []wantErr{{1, "not a Go duration"}}},
		{name: "timeout bare number", src: "# timeout: 30\n", errs: []wantErr{{1, `timeout: "30" is not a Go duration`}}},
		{name: "timeout zero", src: "# timeout: 0s\n", errs: []wantErr{{1, "longer than zero"}}},
		{name: "timeout negative", src: "# timeout: -1s\n", errs: []wantErr{{1, "longer than zero"}}},

		{name: "memory Mi", src: "# memory: 512Mi\n", want: spec(func(s *Spec) { s.Memory = 512 << 20 })},
		{name: "memory Gi", src: "# memory: 2Gi\n", want: spec(func(s *Spec) { s.Memory = 2 << 30 })},
		{name: "memory Ti", src: "# memory: 1Ti\n", want: spec(func(s *Spec) { s.Memory = 1 << 40 })},
		{name: "memory Ki", src: "# memory: 1024Ki\n", want: spec(func(s *Spec) { s.Memory = 1 << 20 })},
		{name: "memory G", src: "# memory: 2G\n", want: spec(func(s *Spec) { s.Memory = 2e9 })},
		{name: "memory bytes", src: "# memory: 1048576\n", want: spec(func(s *Spec) { s.Memory = 1 << 20 })},
		{name: "memory T K", src: "# memory: 3T\n", want: spec(func(s *Spec) { s.Memory = 3e12 })},
		{name: "memory below minimum", src: "# memory: 1M\n", errs: []wantErr{{1, "below the minimum of 1Mi"}}},
		{name: "memory bytes below minimum", src: "# memory: 512\n", errs: []wantErr{{1, "below the minimum"}}},
		{name: "memory zero", src: "# memory: 0Gi\n", errs: []wantErr{{1, "below the minimum"}}},
		{name: "disk Gi", src: "# disk: 8Gi\n", want: spec(func(s *Spec) { s.Disk = 8 << 30 })},
		{name: "disk below minimum", src: "# disk: 512\n", errs: []wantErr{{1, "below the minimum"}}},
		{name: "disk not a size", src: "# disk: lots\n", errs: []wantErr{{1, "is not a size"}}},
		{name: "disk twice", src: "# disk: 1Gi\n# disk: 2Gi\n", errs: []wantErr{{2, "disk"}}},
		{name: "memory lower-case unit", src: "# memory: 512mi\n", errs: []wantErr{{1, `"512mi" is not a size`}}},
		{name: "memory fraction", src: "# memory: 1.5Gi\n", errs: []wantErr{{1, "not a size"}}},
		{name: "memory space", src: "# memory: 512 Mi\n", errs: []wantErr{{1, "not a size"}}},
		{name: "memory overflow", src: "# memory: 9999999Ti\n", errs: []wantErr{{1, "too large"}}},
		{name: "memory huge digits", src: "# memory: 99999999999999999999\n", errs: []wantErr{{1, "too large"}}},

		{name: "network none", src: "# network: none\n", want: spec(func(s *Spec) { s.Network = Network{Mode: NetworkNone} })},
		{name: "network host", src: "# network: host\n", want: spec(func(s *Spec) { s.Network = Network{Mode: NetworkHost} })},
		{name: "network proxy", src: "# network: proxy\n", want: spec(nil)},
		{name: "network proxy ip and port", src: "# network: proxy 10.0.0.1:8080 localhost\n", want: spec(func(s *Spec) {
			s.Network = Network{Mode: NetworkProxy, Hosts: []string{"10.0.0.1:8080", "localhost"}}
		})},
		{name: "network none with hosts", src: "# network: none a.com\n", errs: []wantErr{{1, "none takes no hosts"}}},
		{name: "network host with hosts", src: "# network: host a.com\n", errs: []wantErr{{1, "host takes no hosts"}}},
		{name: "network unknown", src: "# network: bridge\n", errs: []wantErr{{1, `unknown mode "bridge"`}}},
		{name: "network Proxy", src: "# network: Proxy\n", errs: []wantErr{{1, `unknown mode "Proxy"`}}},
		{name: "network bad host", src: "# network: proxy http://a.com\n", errs: []wantErr{{1, "bad port"}}},
		{name: "network bad label", src: "# network: proxy a_b.com\n", errs: []wantErr{{1, "is not a hostname"}}},
		{name: "network inner star", src: "# network: proxy a.*.com\n", errs: []wantErr{{1, "is not a hostname"}}},
		{name: "network bare star", src: "# network: proxy *\n", errs: []wantErr{{1, "is not a hostname"}}},
		{name: "network trailing dot", src: "# network: proxy a.com.\n", errs: []wantErr{{1, "is not a hostname"}}},
		{name: "network port zero", src: "# network: proxy a.com:0\n", errs: []wantErr{{1, "bad port"}}},
		{name: "network port big", src: "# network: proxy a.com:65536\n", errs: []wantErr{{1, "bad port"}}},
		{name: "network port plus", src: "# network: proxy a.com:+80\n", errs: []wantErr{{1, "bad port"}}},
		{name: "network port empty", src: "# network: proxy a.com:\n", errs: []wantErr{{1, "bad port"}}},
		{name: "network duplicate host", src: "# network: proxy a.com A.com\n", errs: []wantErr{{1, `lists host "a.com" twice`}}},

		{name: "retries zero", src: "# retries: 0\n", want: spec(nil)},
		{name: "retries max", src: "# retries: 100\n", want: spec(func(s *Spec) { s.Retries = 100 })},
		{name: "retries over", src: "# retries: 101\n", errs: []wantErr{{1, `"101" is not a whole number from 0 to 100`}}},
		{name: "retries negative", src: "# retries: -1\n", errs: []wantErr{{1, "from 0 to 100"}}},
		{name: "retries plus", src: "# retries: +1\n", errs: []wantErr{{1, "from 0 to 100"}}},
		{name: "retries word", src: "# retries: three\n", errs: []wantErr{{1, "from 0 to 100"}}},
		{name: "concurrency", src: "# concurrency: 1024\n", want: spec(func(s *Spec) { s.Concurrency = 1024 })},
		{name: "concurrency zero", src: "# concurrency: 0\n", errs: []wantErr{{1, "from 1 to 1024"}}},
		{name: "concurrency over", src: "# concurrency: 1025\n", errs: []wantErr{{1, "from 1 to 1024"}}},
		{name: "queue zero", src: "#!/bin/sh\n# queue: 0\n", errs: []wantErr{{2, "from 1 to 10000000"}}},
		{name: "queue over", src: "# queue: 10000001\n", errs: []wantErr{{1, "from 1 to 10000000"}}},
		{name: "queue not a number", src: "# queue: lots\n", errs: []wantErr{{1, `write "queue: <n>"`}}},
		{name: "queue twice", src: "# queue: 5\n# queue: 6\n", errs: []wantErr{{2, "queue: is already set on line 1"}}},
		{name: "queue typo", src: "# qeueue: 5\n", errs: []wantErr{{1, `did you mean "queue:"?`}}},
		{name: "queue", src: "# queue: 500\n", want: spec(func(s *Spec) { s.Queue = 500 })},

		{name: "warm", src: "# warm: 3\n", want: spec(func(s *Spec) { s.Warm = intPtr(3) })},
		{name: "warm zero turns it off", src: "# warm: 0\n", want: spec(func(s *Spec) { s.Warm = intPtr(0) })},
		{name: "warm negative", src: "# sandbox\n# warm: -1\n", errs: []wantErr{{2, `warm: "-1" is not a whole number from 0 to 64`}}},
		{name: "warm word", src: "# warm: lots\n", errs: []wantErr{{1, `warm: "lots" is not a whole number`}}},
		{name: "warm over", src: "# warm: 65\n", errs: []wantErr{{1, "from 0 to 64"}}},
		{name: "warm twice", src: "# warm: 1\n# warm: 2\n", errs: []wantErr{{2, "warm: is already set on line 1"}}},
		{name: "warm typo", src: "# wram: 1\n", errs: []wantErr{{1, `did you mean "warm:"?`}}},

		{name: "schedule every", src: "# schedule: @every 10m\n", want: spec(func(s *Spec) { s.Schedule = "@every 10m" })},
		{name: "schedule hourly", src: "# schedule: @hourly\n", want: spec(func(s *Spec) { s.Schedule = "@hourly" })},
		{name: "schedule cron", src: "# schedule: 0 9 * * MON-FRI\n", want: spec(func(s *Spec) { s.Schedule = "0 9 * * MON-FRI" })},
		{name: "schedule tz", src: "# schedule: CRON_TZ=UTC 0 9 * * *\n", want: spec(func(s *Spec) { s.Schedule = "CRON_TZ=UTC 0 9 * * *" })},
		{name: "schedule six fields", src: "# schedule: 0 0 9 * * *\n", errs: []wantErr{{1, "6 fields, want 5"}}},
		{name: "schedule bad", src: "# schedule: every day\n", errs: []wantErr{{1, `"every day" is not a valid schedule`}}},
		{name: "schedule out of range", src: "# schedule: 61 * * * *\n", errs: []wantErr{{1, "minute 61 is out of range 0-59"}}},
		{name: "schedule never", src: "# schedule: 0 0 30 2 *\n", errs: []wantErr{{1, "never fires"}}},
		{name: "schedule tz without space", src: "# schedule: TZ=UTC\n", errs: []wantErr{{1, "time zone prefix"}}},
		{name: "schedule bad every", src: "# schedule: @every soon\n", errs: []wantErr{{1, "not a valid schedule"}}},
	})
}

func TestParseEnv(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "value with spaces and equals", src: "# env: GREETING=hello there=x\n", want: spec(func(s *Spec) {
			s.Env = []Env{{Name: "GREETING", Value: "hello there=x", Line: 1}}
		})},
		{name: "underscore name", src: "# env: _x1=1\n", want: spec(func(s *Spec) { s.Env = []Env{{Name: "_x1", Value: "1", Line: 1}} })},
		{name: "secret-like text is literal", src: "# env: A=x$secret:k\n# env: B=$secretk\n", want: spec(func(s *Spec) {
			s.Env = []Env{{Name: "A", Value: "x$secret:k", Line: 1}, {Name: "B", Value: "$secretk", Line: 2}}
		})},
		{name: "no equals", src: "# env: NAME\n", errs: []wantErr{{1, `"NAME" has no "="`}}},
		{name: "bad name", src: "# env: 1X=a\n", errs: []wantErr{{1, `"1X" is not a variable name`}}},
		{name: "space before equals", src: "# env: X =a\n", errs: []wantErr{{1, `"X " is not a variable name`}}},
		{name: "empty secret", src: "# env: X=$secret:\n", errs: []wantErr{{1, `secret key ""`}}},
		{name: "bad secret", src: "# env: X=$secret:a b\n", errs: []wantErr{{1, `secret key "a b"`}}},
		{name: "duplicate", src: "# env: X=1\n# env: X=2\n", errs: []wantErr{{2, "X is already set on line 1"}}},
		{name: "reserved", src: "# env: HOME=/x\n# env: JOB_ID=1\n# env: FLOW_ID=1\n# env: FUNCTION=f\n", errs: []wantErr{
			{1, "HOME is set by the host"}, {2, "JOB_ID is set by the host"}, {3, "FLOW_ID is set by the host"}, {4, "FUNCTION is set by the host"},
		}},
	})
}

func TestParseSecrets(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "one", src: "# secrets: anthropic\n", want: spec(func(s *Spec) { s.Secrets = []string{"anthropic"} })},
		{name: "several and repeated", file: "fn.ts", src: "// secrets: a/b.c k_1\n// secrets: gh=token\n", want: spec(func(s *Spec) {
			s.Secrets = []string{"a/b.c", "k_1", "gh=token"}
		})},
		{name: "reference form accepted", src: "# secrets: $secret:anthropic\n", want: spec(func(s *Spec) { s.Secrets = []string{"anthropic"} })},
		{name: "beside env", src: "# env: T=$secret:t\n# secrets: t2\n", want: spec(func(s *Spec) {
			s.Env = []Env{{Name: "T", Value: "$secret:t", Secret: "t", Line: 1}}
			s.Secrets = []string{"t2"}
		})},
		{name: "empty", src: "# secrets:\n", errs: []wantErr{{1, `secrets: needs a value: write "secrets: <key> ..."`}}},
		{name: "bad character", src: "# secrets: ok bad!key\n", errs: []wantErr{{1, `secret key "bad!key" is not a secret name`}}},
		{name: "bad start", src: "# x\n# secrets: -dash\n", errs: []wantErr{{2, `secret key "-dash"`}}},
		{name: "double dot", src: "# secrets: a..b\n", errs: []wantErr{{1, `secret key "a..b"`}}},
		{name: "trailing dot", src: "# secrets: a.\n", errs: []wantErr{{1, `secret key "a."`}}},
		{name: "too long", src: "# secrets: " + strings.Repeat("k", 129) + "\n", errs: []wantErr{{1, "1 to 128 characters"}}},
		{name: "bare reference", src: "# secrets: $secret:\n", errs: []wantErr{{1, `secret key ""`}}},
		{name: "duplicate", src: "# secrets: a b\n# secrets: b\n", errs: []wantErr{{2, `"b" is already declared on line 1`}}},
		{name: "typo", src: "# secret: a\n", errs: []wantErr{{1, `did you mean "secrets:"?`}}},
		{name: "upper case", src: "# Secrets: a\n", errs: []wantErr{{1, `write "secrets:"`}}},
	})
}

func TestDeclaresSecret(t *testing.T) {
	s, err := Parse("fn.py", []byte("# env: T=$secret:tok\n# env: P=plain\n# secrets: anthropic\n"))
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]bool{"tok": true, "anthropic": true, "plain": false, "P": false, "other": false} {
		if got := s.DeclaresSecret(key); got != want {
			t.Errorf("DeclaresSecret(%q) = %v, want %v", key, got, want)
		}
	}
}

func TestParseSecretsErrorNamesFileAndLine(t *testing.T) {
	_, err := Parse("functions/wordcount.py", []byte("# sandbox\n# secrets: s1 no$way\n"))
	if err == nil || !strings.Contains(err.Error(), "functions/wordcount.py:2:") || !strings.Contains(err.Error(), `"no$way"`) {
		t.Fatalf("err = %v, want it to name functions/wordcount.py:2 and the key", err)
	}
}

func TestParseCollectsErrors(t *testing.T) {
	src := "// sandbox\n// volum: a b\n// timeout: soon\n// Memory: 1Gi\n// sandboxx\n// retries: 1\n"
	_, err := Parse("functions/x/main.ts", []byte(src))
	errs := annotErrors(t, err)
	var lines []int
	for _, e := range errs {
		lines = append(lines, e.Line)
	}
	if !reflect.DeepEqual(lines, []int{2, 3, 4, 5}) {
		t.Fatalf("error lines = %v, want [2 3 4 5]\n%v", lines, err)
	}
	if !strings.HasPrefix(err.Error(), "functions/x/main.ts:2: unknown annotation \"volum:\"") {
		t.Errorf("rendered error = %q", err.Error())
	}
	if got := strings.Count(err.Error(), "\n"); got != 3 {
		t.Errorf("rendered error has %d newlines, want 3 (one error per line)", got)
	}
	var first *Error
	if !errors.As(err, &first) || first.Line != 2 {
		t.Errorf("errors.As gave %+v, want the line-2 error", first)
	}
}

func TestKeyTables(t *testing.T) {
	if len(keys) != len(usage) {
		t.Fatalf("keys has %d entries, usage %d", len(keys), len(usage))
	}
	for _, k := range keys {
		if usage[k] == "" {
			t.Errorf("no usage for %q", k)
		}
	}
}

func TestErrorString(t *testing.T) {
	e := &Error{File: "functions/a.py", Line: 7, Msg: "boom"}
	if got, want := e.Error(), "functions/a.py:7: boom"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestParseDoesNotReadPastBlock(t *testing.T) {
	// A large script must not be split in full: only the block is read.
	src := "# sandbox\nimport os\n" + strings.Repeat("x = 1\n", 1<<20)
	allocs := testing.AllocsPerRun(5, func() {
		if _, err := Parse("big.py", []byte(src)); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 50 {
		t.Errorf("Parse made %v allocations for a large file; it should stop at the end of the block", allocs)
	}
}

func intPtr(n int) *int { return &n }
