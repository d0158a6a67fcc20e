package egress

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
)

// Rule is one `egress: <METHOD|*> <host>[/<path glob>]` line: requests to Host may be sent
// with Method (any, for "*") to a path that Path matches ("" matches every path). In Path, "*"
// is any run of characters within one segment and "**" any run across segments; a trailing
// "/**" also matches the path without it ("/repos/acme/**" matches "/repos/acme").
type Rule struct {
	Method string
	Host   string // a name or "*.name", as in an allowlist, without a port
	Path   string
}

func (r Rule) String() string {
	s := r.Method + " " + r.Host
	if r.Path != "" {
		s += r.Path
	}
	return s
}

// rule is a compiled Rule.
type rule struct {
	Rule
	host pattern
	path *regexp.Regexp // nil: any path
}

// ruleMethod is a method token (RFC 9110) or "*".
var ruleMethod = regexp.MustCompile(`^(\*|[A-Z][A-Z-]*)$`)

// compileRules checks and compiles a policy's rules.
func compileRules(rs []Rule) ([]rule, error) {
	out := make([]rule, 0, len(rs))
	for _, r := range rs {
		c, err := compileRule(r)
		if err != nil {
			return nil, fmt.Errorf("egress: rule %q: %w", r.String(), err)
		}
		out = append(out, c)
	}
	return out, nil
}

func compileRule(r Rule) (rule, error) {
	c := rule{Rule: r}
	if !ruleMethod.MatchString(r.Method) {
		return c, errors.New("the method must be an upper-case HTTP method such as GET or POST, or *")
	}
	p, err := parsePattern(r.Host)
	if err != nil {
		return c, err
	}
	if p.port != 0 {
		return c, errors.New("a rule names a host without a port; the port is the allowlist's")
	}
	c.host = p
	if r.Path != "" {
		if c.path, err = compileGlob(r.Path); err != nil {
			return c, err
		}
	}
	return c, nil
}

// CheckRule reports whether r is a rule the proxy can apply, with the reason if not: the
// annotations' parser calls it, so that a bad line fails when its function loads.
func CheckRule(r Rule) error {
	_, err := compileRule(r)
	return err
}

// compileGlob turns a path glob into an anchored regular expression.
func compileGlob(glob string) (*regexp.Regexp, error) {
	if !strings.HasPrefix(glob, "/") {
		return nil, errors.New("the path must start with /")
	}
	for _, seg := range strings.Split(glob[1:], "/") {
		if seg == "." || seg == ".." {
			return nil, errors.New("the path may not hold . or .. segments")
		}
		if strings.Contains(seg, "**") && seg != "**" {
			return nil, errors.New(`"**" must be a whole segment, as in /repos/**`)
		}
	}
	for _, c := range glob {
		if c < 0x21 || c == 0x7f || c == '?' || c == '#' || c == '%' || c == '\\' {
			return nil, fmt.Errorf("the path may not hold %q; write it as the server sees it, unescaped, without a query", c)
		}
	}
	body, optionalTail := glob, false
	if rest, ok := strings.CutSuffix(glob, "/**"); ok {
		body, optionalTail = rest, true
	}
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(body); i++ {
		switch {
		case strings.HasPrefix(body[i:], "**"):
			b.WriteString(".*")
			i++
		case body[i] == '*':
			b.WriteString("[^/]*")
		default:
			b.WriteString(regexp.QuoteMeta(body[i : i+1]))
		}
	}
	if optionalTail {
		b.WriteString("(/.*)?")
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}

// ruleSet is a policy's rules, by host.
type ruleSet []rule

// covers reports whether any rule names host: its requests are then checked one by one.
func (rs ruleSet) covers(host string) bool {
	for _, r := range rs {
		if r.host.matchesHost(host) {
			return true
		}
	}
	return false
}

// allows returns "" when a rule lets method reach path on host, else the reason it is refused.
func (rs ruleSet) allows(method, host, path string) string {
	var methods []string
	for _, r := range rs {
		if !r.host.matchesHost(host) {
			continue
		}
		if r.Method != "*" && r.Method != method {
			methods = append(methods, r.String())
			continue
		}
		if r.path == nil || r.path.MatchString(path) {
			return ""
		}
		methods = append(methods, r.String())
	}
	if len(methods) == 0 {
		return fmt.Sprintf("no egress: rule names %s", host)
	}
	return fmt.Sprintf("no egress: rule allows it (this function allows %s)", strings.Join(methods, ", "))
}

// requestPath is the path a rule is matched against, or why the request's path is refused:
// a path a server could read differently from the proxy (dot segments, an escaped slash or
// backslash) would let a request past a rule that names a narrower path.
func requestPath(r *http.Request) (string, error) {
	escaped := r.URL.EscapedPath()
	lower := strings.ToLower(escaped)
	if strings.Contains(lower, "%2f") || strings.Contains(lower, "%5c") || strings.Contains(escaped, "\\") {
		return "", errors.New("the path holds an escaped / or a \\, which servers read differently")
	}
	p := r.URL.Path
	if p == "" {
		p = "/"
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "." || seg == ".." {
			return "", errors.New("the path holds a . or .. segment")
		}
	}
	return p, nil
}
