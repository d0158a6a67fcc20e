package annot

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/agenthost/host/internal/people"
)

// usage says how each annotation is written; error messages end with it so
// the user sees the fix next to the problem.
var usage = map[string]string{
	"sandbox":      `write "sandbox" on its own`,
	"volume":       `write "volume: <name> <path>", e.g. "volume: claude .claude"`,
	"on":           `write "on: <subject>", e.g. "on: orders.created" or "on: orders.*", or "on: s3:<bucket>[/<prefix>] [created|removed|created,removed]", or "on: postgres:<table> [insert] [update] [delete]"`,
	"next":         `write "next: <subject>", "next: <subject> if <expr>", "next: <subject> else" or "next: <subject> each <expr>", e.g. "next: agent.run.summarize" or "next: agent.run.page if result.severity == 'high'"`,
	"timeout":      `write "timeout: <duration>", e.g. "timeout: 30s" or "timeout: 5m"`,
	"delay":        `write "delay: <duration>" up to 7 days, e.g. "delay: 10m" or "delay: 1h"`,
	"approve":      `write "approve", or "approve: [timeout <duration>] [by <group>[,<group>]] [stage]": how long a decision may take (default 24h, up to 7 days), whose (default: any approver), and with "stage" the step's volume changes wait for the decision instead of being committed, e.g. "approve: timeout 4h by ops,security stage"`,
	"join":         `write "join: <function> ...", the steps whose results this function gathers per flow, e.g. "join: summary review"`,
	"join-timeout": `write "join-timeout: <duration>" up to 7 days, e.g. "join-timeout: 30m"`,
	"memory":       `write "memory: <size>", e.g. "memory: 512Mi" or "memory: 2Gi"`,
	"disk":         `write "disk: <size>", e.g. "disk: 256Mi" or "disk: 4Gi"`,
	"network":      `write "network: none", "network: proxy [host ...]" or "network: host"`,
	"env":          `write "env: NAME=value", "env: NAME=$secret:key" or "env: NAME=$sealed:key[.field]@host[,host...]"`,
	"egress":       `write "egress: <METHOD|*> <host>[/<path glob>]", e.g. "egress: GET api.github.com/repos/acme/**" or "egress: POST api.anthropic.com/v1/messages"`,
	"secrets":      `write "secrets: <key> ...", e.g. "secrets: anthropic github/token"`,
	"retries":      `write "retries: <n>" with n from 0 to 100`,
	"concurrency":  `write "concurrency: <n>" with n from 1 to 1024`,
	"queue":        `write "queue: <n>", the most triggers waiting for this function, with n from 1 to 10000000`,
	"schedule":     `write "schedule: <cron>", e.g. "schedule: */5 * * * *" or "schedule: @every 10m"`,
	"warm":         `write "warm: <n>" with n from 0 (no warm jails) to 64`,
	"reuse":        `write "reuse: <n>" with n from 1 to 10000: one jail serves up to n messages of this function version, one after another, then is replaced (its module state carries over between them; /job, /tmp, the environment and secrets do not); 0 or no line: a fresh jail per message`,
	"tool":         `write "tool" to offer the function as an MCP tool described by the script's doc comment, or "tool: <description>", e.g. "tool: Counts the words of a text"`,
	"tools":        `write "tools: <function> ...", the functions this one may call as MCP tools from its jail, e.g. "tools: wordcount hello"`,
	"pin":          `write "pin: latest" to run the deployment served now in every step, not the one the step's flow started under`,
	"limit":        `write "limit: <n> [per <expr>]" with n from 1 to 1000, at most n runs at once across every host (per value of the CEL expression over args), e.g. "limit: 1 per args.repo"`,
	"rate":         `write "rate: <n>/<duration> [per <expr>]" with n from 1 to 1000 and a period from 1s to 24h, at most n starts per period across every host, e.g. "rate: 50/1m per args.api_key_name"`,
	"debounce":     `write "debounce: <duration> [by <expr>]" with a duration up to 7 days (168h): a message runs only after that long with no newer message of its key, e.g. "debounce: 2s by args.key"`,
	"priority":     `write "priority: <expr>", a CEL expression over args giving 1 to 10 (default 5), e.g. "priority: args.p" or "priority: 7"`,
}

// keys lists the annotations in a fixed order, so that when a typo is
// equally close to two keys the suggestion does not depend on map order.
var keys = []string{
	"sandbox", "volume", "on", "next", "timeout", "memory",
	"disk", "network", "env", "secrets", "retries", "concurrency", "schedule",
	"warm", "delay", "join", "join-timeout", "approve", "tool", "tools", "egress", "queue",
	"pin", "limit", "rate", "debounce", "priority", "reuse",
}

// repeatable are the keys that may appear more than once; a second timeout
// (say) is more likely a copy-paste slip than a wish, so the others may not.
var repeatable = map[string]bool{"volume": true, "on": true, "next": true, "env": true, "secrets": true, "egress": true}

var (
	// keyShape is "word:" at the start of a comment: the shape of an
	// annotation, whether or not the word is one we know.
	keyShape = regexp.MustCompile(`^([A-Za-z][A-Za-z_-]*):(.*)$`)
	// wordShape is a comment that is a single word, the shape of "sandbox".
	wordShape = regexp.MustCompile(`^[A-Za-z][A-Za-z_-]*$`)
	// lowerWord is the shape of words checked for typos. Capitalised words
	// ("Note:", "TODO:") are prose, never a misspelt annotation.
	lowerWord = regexp.MustCompile(`^[a-z][a-z_-]*$`)
)

// parser accumulates the Spec and every error of one Parse call.
type parser struct {
	file string
	spec *Spec
	errs []error

	seen    map[string]int // single-valued key -> line it was set on
	envs    map[string]int // env name -> line
	secrets map[string]int // "secrets:" key -> line
	subj    map[string]int // "on:"/"next:" plus subject -> line
	volumes int            // volume lines seen, valid or not
	mounts  []Volume       // every volume with a usable path, for overlap checks
}

func (p *parser) errorf(line int, format string, args ...any) {
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Msg: fmt.Sprintf(format, args...)})
}

// comment classifies one comment line of the block: an annotation, a
// near-miss of one (an error), or an ordinary comment (ignored).
func (p *parser) comment(line int, body string) {
	if m := keyShape.FindStringSubmatch(body); m != nil {
		p.keyed(line, m[1], strings.TrimSpace(m[2]))
		return
	}
	if wordShape.MatchString(body) {
		p.bare(line, body)
		return
	}
	// "sandbox" followed by prose is still a request for the jail, and
	// running unjailed because of a trailing remark would be the worst way
	// to fail, so it is an error rather than an ordinary comment.
	if f := strings.Fields(body); len(f) > 1 && f[0] == "sandbox" {
		p.errorf(line, `"sandbox" takes no value; %s (put remarks on their own comment line)`, usage["sandbox"])
	}
}

// keyed handles a "word: value" comment.
func (p *parser) keyed(line int, word, value string) {
	lower := strings.ToLower(word)
	switch {
	case word == "sandbox":
		p.errorf(line, `"sandbox:" takes no value; %s`, usage["sandbox"])
	case usage[word] != "":
		p.annotation(line, word, value)
	case usage[lower] != "":
		p.errorf(line, `annotations are lower case: write %q, not %q`, display(lower), word+":")
	case lowerWord.MatchString(word):
		if key, ok := suggest(word); ok {
			p.errorf(line, `unknown annotation %q (did you mean %q?); reword the comment if it is not meant as an annotation`,
				word+":", display(key))
		}
	}
}

// bare handles a comment that is a single word.
func (p *parser) bare(line int, word string) {
	lower := strings.ToLower(word)
	switch {
	case word == "sandbox" || word == "approve" || word == "tool":
		p.annotation(line, word, "")
	case word == lower && usage[word] != "":
		p.errorf(line, "%q needs a value: %s", word, usage[word])
	case usage[lower] != "":
		p.errorf(line, `annotations are lower case: write %q, not %q`, display(lower), word)
	case distance(lower, "sandbox") <= 2:
		p.errorf(line, `unknown annotation %q (did you mean "sandbox"?); reword the comment if it is not meant as an annotation`, word)
	}
}

// display is how an annotation key is written in a script.
func display(key string) string {
	if key == "sandbox" {
		return key
	}
	return key + ":"
}

// annotation applies one recognised annotation to the spec.
func (p *parser) annotation(line int, key, value string) {
	if !repeatable[key] {
		if first, ok := p.seen[key]; ok {
			p.errorf(line, "%s is already set on line %d; it may appear only once", display(key), first)
			return
		}
		p.seen[key] = line
	}
	if key != "sandbox" && key != "approve" && key != "tool" && value == "" {
		p.errorf(line, "%s needs a value: %s", display(key), usage[key])
		return
	}

	var err error
	s := p.spec
	switch key {
	case "sandbox":
		s.Sandbox = true
	case "approve":
		s.Approve, err = parseApprove(line, value)
	case "volume":
		p.volume(line, value)
	case "on":
		if rest, ok := strings.CutPrefix(value, S3Prefix); ok {
			p.s3On(line, rest)
			break
		}
		if !p.postgresOn(line, value) {
			p.subject(line, key, value)
		}
	case "next":
		p.next(line, value)
	case "env":
		p.env(line, value)
	case "secrets":
		p.secretsLine(line, value)
	case "egress":
		p.egress(line, value)
	case "delay":
		s.Delay, err = parseDelay(value)
	case "join":
		s.Join, err = parseJoin(value)
	case "join-timeout":
		s.JoinTimeout, err = parseDelay(value)
	case "tool":
		s.Tool, err = parseTool(line, value)
	case "tools":
		s.Tools, err = parseJoin(value)
		s.ToolsLine = line
	case "timeout":
		s.Timeout, err = parseTimeout(value)
	case "memory":
		s.Memory, err = parseMemory(value)
	case "disk":
		s.Disk, err = parseMemory(value)
	case "network":
		s.Network, err = parseNetwork(value)
	case "retries":
		s.Retries, err = parseCount(value, 0, 100)
	case "concurrency":
		s.Concurrency, err = parseCount(value, 1, 1024)
	case "queue":
		s.Queue, err = parseCount(value, 1, MaxQueue)
	case "pin":
		if value != "latest" {
			err = fmt.Errorf("pin: %q is not a pin", value)
		}
		s.PinLatest = err == nil
	case "limit":
		s.Limit, err = parseLimit(line, value)
	case "rate":
		s.Rate, err = parseRate(line, value)
	case "debounce":
		s.Debounce, err = parseDebounce(line, value)
	case "priority":
		if value == "" {
			err = fmt.Errorf("priority: has no expression")
		}
		s.Priority = &Priority{Expr: value, Line: line}
	case "reuse":
		s.Reuse, err = parseCount(value, 0, MaxReuse)
	case "warm":
		var n int
		if n, err = parseCount(value, 0, MaxWarm); err == nil {
			s.Warm = &n
		}
	case "schedule":
		err = checkSchedule(value)
		if err == nil {
			s.Schedule = value
		}
	}
	if err != nil {
		p.errorf(line, "%s %v; %s", display(key), err, usage[key])
	}
}

// subject records an "on:" or "next:" subject.
func (p *parser) subject(line int, key, value string) {
	if err := checkSubject(value, key == "on"); err != nil {
		p.errorf(line, "%s %v; %s", display(key), err, usage[key])
		return
	}
	id := key + " " + value
	if first, ok := p.subj[id]; ok {
		p.errorf(line, "%s %q is already given on line %d", display(key), value, first)
		return
	}
	p.subj[id] = line
	p.spec.On = append(p.spec.On, value)
}

func parseApprove(line int, value string) (*Approve, error) {
	a := &Approve{Timeout: DefaultApproveTimeout, Line: line}
	rest, stage, err := cutStage(value)
	if err != nil {
		return nil, err
	}
	a.Stage = stage
	if word, after, _ := strings.Cut(rest, " "); word == "timeout" {
		d, more, _ := strings.Cut(strings.TrimSpace(after), " ")
		if a.Timeout, err = parseDelay(d); err != nil {
			return nil, err
		}
		rest = strings.TrimSpace(more)
	}
	if rest == "" {
		return a, nil
	}
	word, groups, _ := strings.Cut(rest, " ")
	if word != "by" {
		return nil, fmt.Errorf("%q: it takes nothing, \"timeout <duration>\", \"by <group>[,<group>]\", or both in that order", value)
	}
	if slices.Contains(strings.Fields(groups), "timeout") {
		return nil, fmt.Errorf("%q: \"timeout <duration>\" comes before \"by\", as in \"approve: timeout 4h by ops\"", value)
	}
	a.Groups, err = parseGroups(strings.TrimSpace(groups))
	return a, err
}

// cutStage takes the word "stage" out of an approve: value, wherever it stands as a word of its
// own: not as the group "by" names ("by stage") nor one after a comma ("by ops, stage"), which
// are groups that happen to be called stage.
func cutStage(value string) (string, bool, error) {
	words := strings.Fields(value)
	kept := words[:0:0]
	stage := false
	for i, w := range words {
		group := i > 0 && (words[i-1] == "by" || strings.HasSuffix(words[i-1], ","))
		if w != "stage" || group {
			kept = append(kept, w)
			continue
		}
		if stage {
			return "", false, fmt.Errorf("%q: \"stage\" is given twice", value)
		}
		stage = true
	}
	return strings.Join(kept, " "), stage, nil
}

// stageNeedsVolume refuses "approve: ... stage" in a function without a volume: there would be
// nothing to stage, and the author who wrote it expects a person to see (and gate) file changes
// that would in fact never be held back. An error, not a warning: a gate that silently lets
// nothing through to review is the kind of mistake a deploy should stop at.
func (p *parser) stageNeedsVolume() {
	if a := p.spec.Approve; a != nil && a.Stage && len(p.spec.Volumes) == 0 {
		p.errorf(a.Line, "approve: \"stage\" holds the step's volume changes until the decision, but this function has no volume: line; add one (%s) or drop \"stage\"", usage["volume"])
	}
}

// parseGroups reads the groups of "approve: ... by <group>[,<group>]": names a user's --group
// can have (people.NameRE), comma separated.
func parseGroups(list string) ([]string, error) {
	if list == "" {
		return nil, errors.New(`"by" names no group: write "by <group>", or several as "by ops,security"`)
	}
	var out []string
	for g := range strings.SplitSeq(list, ",") {
		g = strings.TrimSpace(g)
		switch {
		case g == "":
			return nil, fmt.Errorf("by %q has an empty group name between commas", list)
		case strings.ContainsAny(g, " \t"):
			return nil, fmt.Errorf("by %q: separate groups with commas, as in \"by %s\"", list, strings.Join(strings.Fields(strings.ReplaceAll(list, ",", " ")), ","))
		case !people.NameRE.MatchString(g):
			return nil, fmt.Errorf("group %q is not a group name: letters, digits, _ and -, starting with a letter or digit, at most 64", g)
		case slices.Contains(out, g):
			return nil, fmt.Errorf("by names group %s twice", g)
		}
		out = append(out, g)
	}
	return out, nil
}

// joinShape is a function name, as functions.CheckName allows.
var joinShape = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

func parseJoin(value string) ([]string, error) {
	fns := strings.Fields(value)
	if len(fns) == 0 {
		return nil, fmt.Errorf("names no function")
	}
	for i, fn := range fns {
		if !joinShape.MatchString(fn) {
			return nil, fmt.Errorf("%q is not a function name (lower-case letters, digits, - and _)", fn)
		}
		if slices.Contains(fns[:i], fn) {
			return nil, fmt.Errorf("names %s twice", fn)
		}
	}
	return fns, nil
}

// timeoutNeedsJoin refuses a join-timeout: in a function that joins nothing, which would be
// ignored.
func (p *parser) timeoutNeedsJoin() {
	if line, ok := p.seen["join-timeout"]; ok && len(p.spec.Join) == 0 {
		p.errorf(line, "join-timeout: this function has no join: line for it to bound; %s", usage["join"])
	}
}

// elseNeedsIf refuses an "else" edge in a function without any "if" edge, which would always
// fire: plain "next: <subject>" says that.
func (p *parser) elseNeedsIf() {
	if slices.ContainsFunc(p.spec.Next, func(n Next) bool { return n.If != "" }) {
		return
	}
	for _, n := range p.spec.Next {
		if n.Else {
			p.errorf(n.Line, "next: %s else: there is no \"next: <subject> if <expr>\" for it to be the else of; write \"next: %s\" to always publish there", n.Subject, n.Subject)
		}
	}
}

// next records a "next:" line: a subject, then nothing, "if <expr>", "else" or "each <expr>".
func (p *parser) next(line int, value string) {
	subject, rest, _ := strings.Cut(value, " ")
	rest = strings.TrimSpace(rest)
	n := Next{Subject: subject, Line: line}
	word, expr, _ := strings.Cut(rest, " ")
	expr = strings.TrimSpace(expr)
	switch {
	case rest == "":
	case word == "else" && expr == "":
		n.Else = true
	case (word == "if" || word == "each") && expr == "":
		p.errorf(line, "next: %q has no expression after %q; %s", value, word, usage["next"])
		return
	case word == "if":
		n.If = expr
	case word == "each":
		n.Each = expr
	default:
		p.errorf(line, "next: %q: after the subject comes \"if <expr>\", \"else\" or \"each <expr>\", not %q; %s", value, word, usage["next"])
		return
	}
	if err := checkSubject(subject, false); err != nil {
		p.errorf(line, "next: %v; %s", err, usage["next"])
		return
	}
	id := "next " + subject + " " + rest
	if first, ok := p.subj[id]; ok {
		p.errorf(line, "next: %q is already given on line %d", value, first)
		return
	}
	p.subj[id] = line
	p.spec.Next = append(p.spec.Next, n)
}

// env records an "env:" variable.
func (p *parser) env(line int, value string) {
	e, err := parseEnv(value)
	if err != nil {
		p.errorf(line, "env: %v; %s", err, usage["env"])
		return
	}
	if first, ok := p.envs[e.Name]; ok {
		p.errorf(line, "env: %s is already set on line %d; set each variable once", e.Name, first)
		return
	}
	p.envs[e.Name] = line
	e.Line = line
	p.spec.Env = append(p.spec.Env, e)
}

// secretsLine records the keys of a "secrets:" line: the secrets callers may
// pass to this function as "$secret:<key>" arguments. Every bad key on the
// line is reported, and none of the line's keys is kept then, so a typo
// cannot leave the function with half of what it meant to declare.
func (p *parser) secretsLine(line int, value string) {
	ok := true
	var keys []string
	for _, key := range strings.Fields(value) {
		key = strings.TrimPrefix(key, secretPrefix) // "$secret:k" is a natural slip for "k"
		if err := checkSecretKey(key); err != nil {
			p.errorf(line, "secrets: %v; %s", err, usage["secrets"])
			ok = false
			continue
		}
		if first, dup := p.secrets[key]; dup {
			p.errorf(line, "secrets: %q is already declared on line %d; declare each secret once", key, first)
			ok = false
			continue
		}
		p.secrets[key] = line
		keys = append(keys, key)
	}
	if ok {
		p.spec.Secrets = append(p.spec.Secrets, keys...)
	}
}

// volume records a "volume:" mount, checking it against the earlier ones.
func (p *parser) volume(line int, value string) {
	p.volumes++
	if p.volumes > maxVolumes {
		p.errorf(line, "volume: too many volumes; at most %d are allowed", maxVolumes)
		return
	}
	fields := strings.Fields(value)
	if len(fields) != 2 {
		p.errorf(line, "volume: expected a name and a path, got %q; %s", value, usage["volume"])
		return
	}
	name, raw := fields[0], fields[1]
	ok := true
	if err := checkTemplate(name); err != nil {
		p.errorf(line, "%v", err) // already starts with "volume name"
		ok = false
	}
	dir, err := cleanVolumePath(raw)
	if err != nil {
		p.errorf(line, "volume: %v", err)
		return
	}
	for _, v := range p.mounts {
		if err := overlap(dir, v); err != nil {
			p.errorf(line, "volume: %v", err)
			return
		}
	}
	// Remember the mount even when its name is bad, so that an overlap with
	// it is reported now rather than after the user fixes the name.
	v := Volume{Name: name, Path: dir, Line: line}
	p.mounts = append(p.mounts, v)
	if ok {
		p.spec.Volumes = append(p.spec.Volumes, v)
	}
}
