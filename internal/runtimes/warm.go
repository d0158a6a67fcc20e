package runtimes

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
)

// bashWarm is the prelude a warm bash jail waits in (warm.sh).
const bashWarm = "warm.sh"

// bashRun runs a bash script in its own shell with the end line after it (bash.sh).
const bashRun = "bash.sh"

// CanWarm reports whether jobs of kind can be served by a warm jail: a runtime started ahead
// that waits for its job (Python, Bun, bash). An executable runs as itself, with nothing of
// ours in front to wait.
func CanWarm(kind Kind) bool {
	return kind == Python || kind == Bun || kind == Bash
}

// BuildWarm returns how to start a warm jail's runtime: loaded and blocked reading its
// hand-over (see Handover) from stdin. importAhead lets Python and Bun import the script
// (run its top-level code) before the hand-over; without it that waits for the job, whose
// environment the top-level code may need. A runtime whose import ahead fails exits with
// ExitImportAhead before reading anything; its next jails should then import late. Env holds
// the runtime's own settings, as Build's.
func BuildWarm(kind Kind, p Paths, importAhead bool) (*Command, error) {
	if p.Script == "" || p.ShimDir == "" || p.IODir == "" {
		return nil, fmt.Errorf("runtimes: BuildWarm: Paths.Script, ShimDir and IODir are all needed")
	}
	mode := "--warm-late"
	if importAhead {
		mode = "--warm"
	}
	switch kind {
	case Python, Bun:
		cmd, err := Build(kind, p, nil, nil)
		if err != nil {
			return nil, err
		}
		cmd.Argv = append(cmd.Argv, mode)
		return cmd, nil
	case Bash:
		return &Command{Argv: []string{"bash", filepath.Join(p.ShimDir, bashWarm), p.Script}}, nil
	}
	return nil, fmt.Errorf("runtimes: BuildWarm: %s scripts cannot wait in a warm jail", kind)
}

// envName is what a shell accepts after export.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Handover is what a warm jail of kind reads on stdin to become a job: its arguments and the
// environment the job adds to what the jail started with (KEY=VALUE entries: JOB_ID, the
// function's env: and secrets, bash's ARG_*). payload is the raw JSON object of arguments.
// The caller writes it and closes the pipe: the runtimes read to EOF.
func Handover(kind Kind, payload []byte, env []string) ([]byte, error) {
	vars := make(map[string]string, len(env))
	var order []string
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !envName.MatchString(k) || strings.IndexByte(v, 0) >= 0 {
			return nil, fmt.Errorf("runtimes: Handover: bad environment entry %q (want NAME=value, no NUL)", k)
		}
		if _, seen := vars[k]; !seen {
			order = append(order, k)
		}
		vars[k] = v // later entries win, as in the cold path's environment
	}
	switch kind {
	case Python, Bun:
		if len(strings.TrimSpace(string(payload))) == 0 {
			payload = []byte("{}")
		}
		return json.Marshal(struct {
			Args json.RawMessage   `json:"args"`
			Env  map[string]string `json:"env"`
		}{payload, vars})
	case Bash:
		var b strings.Builder
		for _, k := range order {
			b.WriteString("export " + k + "=" + bashQuote(vars[k]) + "\n")
		}
		b.WriteString("\n")
		if len(strings.TrimSpace(string(payload))) == 0 {
			payload = []byte("{}")
		}
		b.Write(payload)
		return []byte(b.String()), nil
	}
	return nil, fmt.Errorf("runtimes: Handover: %s scripts cannot wait in a warm jail", kind)
}

// bashQuote quotes s as one word of bash on one line: $'...' with every byte outside a plain
// set escaped, so no value can end the quote, the line or the hand-over.
func bashQuote(s string) string {
	var b strings.Builder
	b.WriteString("$'")
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', strings.IndexByte(" ._-/:,+=@%", c) >= 0:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "\\x%02x", c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// CanFork reports whether jobs of kind can be forked from a template jail (sandbox.Template):
// Python only. Bun starts threads of its own before it runs a line of ours (its JIT, garbage
// collector and I/O threads), and a fork copies only the thread that forks: the child would
// inherit whatever locks those threads held, forever held, and memory in whatever state they
// left it. Its jobs stay on warm jails. A bash start costs less than the namespace set-up a
// fork does, so bash would not gain.
func CanFork(kind Kind) bool { return kind == Python }

// BuildTemplate returns how to start a template jail's runtime for kind (see CanFork): the
// interpreter and the shim loaded, serving forks on its stdin (a control socket), each of
// which runs a job as Build's command would. It never imports the script.
func BuildTemplate(kind Kind, p Paths) (*Command, error) {
	if !CanFork(kind) {
		return nil, fmt.Errorf("runtimes: BuildTemplate: %s jobs cannot be forked from a template", kind)
	}
	cmd, err := Build(kind, p, nil, nil)
	if err != nil {
		return nil, err
	}
	cmd.Argv = append(cmd.Argv, "--template")
	return cmd, nil
}
