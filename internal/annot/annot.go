// Package annot reads the annotations at the top of a function script.
//
// A function is a script under functions/ (functions/<name>.<ext> or
// functions/<name>/main.<ext>). The comment block it starts with may carry
// annotations that tell the host how to run it:
//
//	// sandbox
//	// volume: claude .claude
//	// timeout: 5m
//
// The block is made of the comment lines at the top of the file ("//" for
// TypeScript and JavaScript, "#" for everything else). Blank lines are
// allowed, a leading "#!" shebang is skipped, and the block ends at the first
// line that is neither blank nor such a comment. Ordinary comments in the
// block are ignored, but a comment that looks like a misspelt or mis-cased
// annotation is reported, because silently dropping "volum: data data" would
// lose the user's data at run time instead of failing at deploy time.
package annot

import (
	"errors"
	"fmt"
	"iter"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// NetworkMode is how a sandboxed job reaches the network.
type NetworkMode string

const (
	// NetworkNone gives the jail no network at all.
	NetworkNone NetworkMode = "none"
	// NetworkProxy allows egress only through the host's proxy, optionally
	// only to the hosts in Network.Hosts. It is the default.
	NetworkProxy NetworkMode = "proxy"
	// NetworkHost shares the host's own network.
	NetworkHost NetworkMode = "host"
)

// Network is the jail's network policy.
type Network struct {
	Mode NetworkMode
	// Hosts is the proxy allowlist, lower-cased, each a hostname or
	// "*.domain" with an optional ":port". Empty means any host; it is
	// always empty for the other modes.
	Hosts []string
}

// Volume is a persistent volume mounted into the job directory.
type Volume struct {
	// Name is the template as written; call Expand to resolve it for a run.
	Name string
	// Path is where to mount it, cleaned and relative to the job directory.
	Path string
	// Line is the annotation's line in the script, for error messages.
	Line int
}

// Env is an environment variable set inside the job.
type Env struct {
	Name, Value string
	// Secret is the key when Value is "$secret:<key>", else "". The host
	// resolves it at run time, so secrets never sit in the script.
	Secret string
	// Sealed is set when Value is "$sealed:...": the job gets a placeholder instead.
	Sealed *Sealed
	Line   int
}

// Next is one "next:" line: a subject the result is published to, always, only when a
// condition holds (If), only when no condition of the function held (Else), or once per
// element of a list (Each). If and Each are CEL expressions over result and args, as written;
// package route compiles them.
type Next struct {
	Subject string
	If      string
	Else    bool
	Each    string
	Line    int
}

// Spec is everything the annotations of one script ask for. Zero values
// mean "not set", so the host's defaults apply.
type Spec struct {
	Sandbox bool
	Volumes []Volume
	On      []string // extra trigger subjects, besides agent.run.<name>
	Next    []Next   // where the result is published, and when
	Timeout time.Duration
	// Approve, when set, makes the step's next steps wait for a person's decision on its result.
	Approve *Approve
	// Join names the steps whose results this function gathers per flow before it runs once
	// (see package join); JoinTimeout is how long it waits for them, 0: DefaultJoinTimeout.
	Join        []string
	JoinTimeout time.Duration
	// Delay is how long after it was published each trigger waits before it runs; 0: none.
	Delay  time.Duration
	Memory int64 // bytes
	// Disk bounds the job's directory (/job and the volumes in it), in bytes; 0: the host's
	// --job-disk.
	Disk    int64
	Network Network
	Env     []Env
	// Secrets are the keys callers may pass as "$secret:<key>" arguments,
	// besides those Env names; any other is refused before the store is read.
	Secrets     []string
	Retries     int
	Concurrency int
	// Queue bounds the triggers waiting for this function (not yet delivered or not yet
	// acknowledged); 0 when not set. Callers through package client refuse a call past it
	// (see docs/contract.md, "Queue limits").
	Queue    int
	Schedule string // as written, already validated; see ParseSchedule
	// Warm is how many jails the host keeps started for this function ahead of its jobs;
	// nil when not set (the host's --warm applies), 0 for none.
	Warm *int
	// Reuse is how many messages of this function version one jail serves, one after another,
	// before it is replaced (reuse: <n>); 0 (the default): a fresh jail per message.
	Reuse int
	// Tool, when set, offers the function as an MCP tool on the host's /mcp (see package mcp);
	// nil when the function did not opt in (serve --mcp-all offers it all the same).
	Tool *Tool
	// Tools names the functions this one may call as MCP tools from inside its jail.
	Tools []string
	// ToolsLine is the tools: line's number, for the errors that blame it (a cycle).
	ToolsLine int
	// PinLatest (pin: latest) runs each of the function's steps on the deployment served when
	// it runs, not on the one its flow started under (package deploy; docs/contract.md,
	// "Deployments").
	PinLatest bool
	// Egress are the egress: lines: with any, the jail's requests to their hosts are read
	// and only those they allow are sent.
	Egress []EgressRule
	// Limit and Rate are flow control across every host (limit:, rate:); nil when not set.
	Limit *Limit
	Rate  *Rate
	// Debounce runs the newest message of a burst only (debounce:); nil when not set.
	Debounce *Debounce
	// Priority orders the waiting messages (priority:); nil when not set.
	Priority *Priority

	// S3 are the on: s3:<bucket>[/<prefix>] lines (s3.go): objects created (or removed) in the
	// bucket start a run, from the S3 server's bucket notifications (package s3events).
	S3 []S3On
}

// Tool is a "tool:" line.
type Tool struct {
	// Description is what the model reads about the tool, as written; "" when the line gave
	// none, and the script's doc comment (Doc) describes it.
	Description string
	Line        int
}

// Approve is an approve: line.
type Approve struct {
	Timeout time.Duration // how long the decision may take; then the step fails
	// Groups are the groups whose members may decide ("by ops,security"); none: any approver.
	// The operator and a signed link are not held to them (see host.checkDecider).
	Groups []string
	// Stage ("approve: ... stage") keeps the step's volume commits staged until the decision:
	// stored as versions of their own, each head left where it was; approve makes them current,
	// reject or timeout discards them.
	Stage bool
	Line  int
}

// DefaultApproveTimeout is how long an approval waits without "approve: timeout".
const DefaultApproveTimeout = 24 * time.Hour

// DefaultJoinTimeout is how long a join waits for what it gathers without join-timeout:.
const DefaultJoinTimeout = time.Hour

// MaxQueue bounds `queue:`.
const MaxQueue = 10_000_000

// MaxWarm bounds `warm:`: each waiting jail holds a process tree and its memory, and the
// host's --warm-max caps the total anyway.
const MaxWarm = 64

// MaxReuse bounds `reuse:`: a jail is replaced at the latest after this many messages, so that
// what a long-lived process gathers (memory, CPU time against its limit) is bounded too.
const MaxReuse = 10000

// DeclaresSecret reports whether the function's own annotations ("env:" or
// "secrets:") name secret key: a function receives no other secret.
func (s *Spec) DeclaresSecret(key string) bool {
	if slices.Contains(s.Secrets, key) {
		return true
	}
	for _, e := range s.Env {
		if e.Secret == key {
			return true
		}
	}
	return false
}

// SealedSecrets lists the secrets the function's sealed env: lines name ("$sealed:<ref>@..."), as
// written, sorted: a secret's name, or a name, a dot and a field of the JSON object stored under
// it. The job never holds them; the egress proxy puts them in its requests.
func (s *Spec) SealedSecrets() []string {
	var out []string
	for _, e := range s.Env {
		if e.Sealed != nil && !slices.Contains(out, e.Sealed.Ref) {
			out = append(out, e.Sealed.Ref)
		}
	}
	slices.Sort(out)
	return out
}

// Error is one bad annotation. Parse joins them with errors.Join; use
// errors.As to get the first or unwrap the join to get them all.
type Error struct {
	File string
	Line int
	Msg  string
}

// Error renders "file:line: message", the form editors and CI logs link.
func (e *Error) Error() string {
	return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
}

// Parse reads the annotation block of src. file is used for error messages
// and to choose the comment prefix by extension: .ts .tsx .js .mjs .cjs use
// "//"; everything else "#".
//
// It returns every problem found (errors.Join of *Error values), not just the
// first, so one deploy shows the user everything to fix. On error the Spec is
// nil: a half-understood script must not run.
func Parse(file string, src []byte) (*Spec, error) {
	p := &parser{
		file:    file,
		spec:    &Spec{Network: Network{Mode: NetworkProxy}},
		seen:    map[string]int{},
		envs:    map[string]int{},
		secrets: map[string]int{},
		subj:    map[string]int{},
	}
	for n, body := range commentBlock(string(src), commentPrefix(file)) {
		p.comment(n, body)
	}
	p.elseNeedsIf()
	p.timeoutNeedsJoin()
	p.stageNeedsVolume()
	p.sealedReachable()
	p.reuseSafe()
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return p.spec, nil
}

// CommentPrefix is the line-comment marker annotations are written with in
// file ("//" or "#"), for messages that tell the user what line to add.
func CommentPrefix(file string) string { return commentPrefix(file) }

// commentPrefix picks the line-comment marker of the script's language.
func commentPrefix(file string) string {
	switch strings.ToLower(filepath.Ext(file)) {
	case ".ts", ".tsx", ".js", ".mjs", ".cjs":
		return "//"
	}
	return "#"
}

// commentBlock yields the line number and text (prefix and surrounding space
// removed) of each comment line in the leading block of src.
func commentBlock(src, prefix string) iter.Seq2[int, string] {
	return func(yield func(int, string) bool) {
		src = strings.TrimPrefix(src, "\ufeff") // editors on Windows add a BOM
		for n, line := range lines(src) {
			if n == 1 && strings.HasPrefix(line, "#!") {
				continue
			}
			line = strings.TrimSpace(line)
			if line == "" {
				continue
			}
			body, ok := strings.CutPrefix(line, prefix)
			if !ok {
				return
			}
			if !yield(n, strings.TrimSpace(body)) {
				return
			}
		}
	}
}

// lines yields the numbered lines of s. It ends lines at "\n", "\r\n" and a
// lone "\r", as both JavaScript and Python do, so a comment can never run on
// into code that the interpreter sees as a separate line. It stops as soon as
// the caller does, so a large bundle is not split in full.
func lines(s string) iter.Seq2[int, string] {
	return func(yield func(int, string) bool) {
		for n := 1; s != ""; n++ {
			i := strings.IndexAny(s, "\r\n")
			if i < 0 {
				yield(n, s)
				return
			}
			line := s[:i]
			if s[i] == '\r' && i+1 < len(s) && s[i+1] == '\n' {
				i++
			}
			s = s[i+1:]
			if !yield(n, line) {
				return
			}
		}
	}
}
