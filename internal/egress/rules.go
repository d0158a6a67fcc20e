package egress

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/agenthost/host/internal/egressrule"
)

// Rule is one `egress: <METHOD|*> <host>[/<path glob>]` line (egressrule.Rule).
type Rule = egressrule.Rule

// compileRules checks and compiles a policy's rules.
func compileRules(rs []Rule) ([]egressrule.Compiled, error) {
	out := make([]egressrule.Compiled, 0, len(rs))
	for _, r := range rs {
		c, err := egressrule.Compile(r)
		if err != nil {
			return nil, fmt.Errorf("egress: rule %q: %w", r.String(), err)
		}
		out = append(out, c)
	}
	return out, nil
}

// ruleSet is a policy's rules, by host.
type ruleSet []egressrule.Compiled

// covers reports whether any rule names host: its requests are then checked one by one.
func (rs ruleSet) covers(host string) bool {
	for _, r := range rs {
		if r.Host.MatchesHost(host) {
			return true
		}
	}
	return false
}

// allows returns "" when a rule lets method reach path on host, else the reason it is refused.
func (rs ruleSet) allows(method, host, path string) string {
	var methods []string
	for _, r := range rs {
		if !r.Host.MatchesHost(host) {
			continue
		}
		if r.Method != "*" && r.Method != method {
			methods = append(methods, r.String())
			continue
		}
		if r.MatchesPath(path) {
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
