package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/host/internal/testkit/hosttest"
)

// readmeStep is one command of a README block marked for testing, with what it must print.
type readmeStep struct {
	cmd  string
	want []string // lines of its output, in order; "…" stands for anything
	code int
}

const readmeMark = "<!-- readme-test -->"

var exitLine = regexp.MustCompile(`^\(exit status (\d+)\)$`)

// readmeSteps reads the console blocks that follow readmeMark: "$ " starts a command, the
// lines after it are what it prints, and "(exit status N)" is its exit status (0 unless said).
func readmeSteps(readme string) ([]readmeStep, error) {
	var steps []readmeStep
	lines := strings.Split(readme, "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != readmeMark {
			continue
		}
		i++
		for i < len(lines) && strings.TrimSpace(lines[i]) == "" {
			i++
		}
		if i == len(lines) || !strings.HasPrefix(lines[i], "```") {
			return nil, fmt.Errorf("line %d: %s is not followed by a fenced block", i, readmeMark)
		}
		for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
			line := lines[i]
			switch m := exitLine.FindStringSubmatch(line); {
			case strings.HasPrefix(line, "$ "):
				steps = append(steps, readmeStep{cmd: strings.TrimPrefix(line, "$ ")})
			case len(steps) == 0:
				return nil, fmt.Errorf("line %d: output before any command: %q", i+1, line)
			case m != nil:
				steps[len(steps)-1].code, _ = strconv.Atoi(m[1])
			case strings.TrimSpace(line) != "":
				steps[len(steps)-1].want = append(steps[len(steps)-1].want, line)
			}
		}
	}
	return steps, nil
}

// lineMatches: want's pieces between "…" appear in line in order, the first at its start and
// the last at its end.
func lineMatches(want, line string) bool {
	line = strings.TrimRight(line, " \t")
	parts := strings.Split(want, "…")
	if !strings.HasPrefix(line, parts[0]) || !strings.HasSuffix(line, parts[len(parts)-1]) {
		return false
	}
	rest := line[len(parts[0]):]
	for _, p := range parts[1:] {
		j := strings.Index(rest, p)
		if j < 0 {
			return false
		}
		rest = rest[j+len(p):]
	}
	return len(parts) > 1 || line == want
}

// missing returns the first wanted line that out does not print, in order; "" when none.
func missing(want []string, out string) string {
	lines := strings.Split(out, "\n")
	at := 0
	for _, w := range want {
		for at < len(lines) && !lineMatches(w, lines[at]) {
			at++
		}
		if at == len(lines) {
			return w
		}
		at++
	}
	return ""
}

func TestReadmeStepMatching(t *testing.T) {
	cases := []struct {
		want, line string
		ok         bool
	}{
		{`{"a":1}`, `{"a":1}`, true},
		{`{"a":1}`, `{"a":1} more`, false},
		{`0…step1…succeeded…agent.run.step2`, "0    step1  x  succeeded  1ms  agent.result.step1,agent.run.step2", true},
		{`0…step1…succeeded…agent.run.step2`, "0    step2  x  succeeded  1ms  agent.result.step2", false},
		{`…functions ok`, "9 functions ok", true},
		{`host version …`, "host version (devel)", true},
		{`host version …`, "version", false},
	}
	for _, c := range cases {
		if got := lineMatches(c.want, c.line); got != c.ok {
			t.Errorf("lineMatches(%q, %q) = %t, want %t", c.want, c.line, got, c.ok)
		}
	}
	steps, err := readmeSteps("x\n" + readmeMark + "\n\n```console\n$ a\none\n(exit status 2)\n$ b\n```\n")
	if err != nil || len(steps) != 2 || steps[0].cmd != "a" || steps[0].code != 2 || len(steps[0].want) != 1 || steps[1].cmd != "b" {
		t.Fatalf("steps %+v, %v", steps, err)
	}
}

// TestReadmeCommands runs the README's marked commands as written, in one shell (so that
// `id=$(...)` carries on), in a directory holding the host binary as ./host and a copy of the
// example functions, against a real `host serve` on free ports that the commands find through
// $NATS_URL. Each must exit as the README says and print the lines it shows.
func TestReadmeCommands(t *testing.T) {
	hosttest.RequireBwrap(t)
	if _, err := exec.LookPath("bun"); err != nil {
		t.Skip("SKIPPED LOUDLY: bun is not installed; .ci/run installs it (npm install -g bun@1.4.4)")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	steps, err := readmeSteps(string(readme))
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) < 10 {
		t.Fatalf("the README marks %d commands for testing; its first session has more", len(steps))
	}

	e := newExposureEnv(t, nil)
	if out, err := exec.Command("cp", "-R", "../../functions/.", e.fns).CombinedOutput(); err != nil {
		t.Fatalf("copy the example functions: %v %s", err, out)
	}
	if err := os.Symlink(hostBin, filepath.Join(e.dir, "host")); err != nil {
		t.Fatal(err)
	}
	natsAddr := freeAddr(t)
	// The key where the CLI looks for it by default, as a plain `host serve` puts it.
	key := filepath.Join(e.dir, "config", "host", "secrets.key")
	startServe(t, e, nil, freeAddr(t), "--nats-listen", natsAddr, "--secrets-key-file", key)

	outDir := t.TempDir()
	var script strings.Builder
	for i, s := range steps {
		fmt.Fprintf(&script, "{\n%s\n} >%q 2>&1; echo $? >%q\n", s.cmd, filepath.Join(outDir, fmt.Sprint(i, ".out")), filepath.Join(outDir, fmt.Sprint(i, ".code")))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sh := exec.CommandContext(ctx, "bash", "-c", script.String())
	sh.Dir = e.dir
	sh.Env = append(e.env, "NATS_URL=nats://"+natsAddr)
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("the README's commands did not all run: %v %s", err, out)
	}
	for i, s := range steps {
		out, _ := os.ReadFile(filepath.Join(outDir, fmt.Sprint(i, ".out")))
		codeText, _ := os.ReadFile(filepath.Join(outDir, fmt.Sprint(i, ".code")))
		code, err := strconv.Atoi(strings.TrimSpace(string(codeText)))
		if err != nil {
			t.Errorf("$ %s: no exit status (%q)", s.cmd, codeText)
			continue
		}
		if code != s.code {
			t.Errorf("$ %s: exit status %d, the README says %d; it printed:\n%s", s.cmd, code, s.code, out)
			continue
		}
		if w := missing(s.want, string(out)); w != "" {
			t.Errorf("$ %s: no line %q (in the README's order) in what it printed:\n%s", s.cmd, w, out)
		}
	}
}
