package runtimes

import (
	"slices"
	"strings"
	"testing"
)

func TestReuseFrame(t *testing.T) {
	py, err := ReuseFrame(Python, []byte(`{"a": "x\ny"}`), []string{"JOB_ID=j1", "K=v"})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"args":{"a":"x\ny"},"env":{"JOB_ID":"j1","K":"v"}}` + "\n"; string(py) != want || strings.Count(string(py), "\n") != 1 {
		t.Fatalf("Python frame %q, want %q: one line", py, want)
	}
	payload := "{\"a\": \"é\"}\n"
	sh, err := ReuseFrame(Bash, []byte(payload), []string{"JOB_ID=j1", "ARG_A=it's"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "export JOB_ID=$'j1'\nexport ARG_A=$'it\\x27s'\n\n12\n" + payload; string(sh) != want {
		t.Fatalf("bash frame %q, want %q (the payload's length in bytes, then the payload)", sh, want)
	}
	if empty, _ := ReuseFrame(Bash, nil, nil); string(empty) != "\n2\n{}" {
		t.Fatalf("an empty payload frames as %q, want the empty object", empty)
	}
	if _, err := ReuseFrame(Exec, nil, nil); err == nil {
		t.Fatal("an executable has no reuse frame")
	}
	p := Paths{Script: "/f/s.py", ShimDir: "/s", IODir: "/io"}
	for kind, want := range map[Kind]string{Python: "--reuse-late", Bun: "--reuse-late", Bash: "/s/reuse.sh"} {
		cmd, err := BuildReuse(kind, p, false)
		if err != nil || !slices.Contains(cmd.Argv, want) {
			t.Fatalf("BuildReuse(%s) = %v, %v; want %s in it", kind, cmd, err, want)
		}
	}
	if cmd, _ := BuildReuse(Python, p, true); cmd.Argv[len(cmd.Argv)-1] != "--reuse" {
		t.Fatalf("BuildReuse ahead = %v", cmd.Argv)
	}
	if _, err := BuildReuse(Exec, p, false); err == nil {
		t.Fatal("BuildReuse of an executable must fail")
	}
}
