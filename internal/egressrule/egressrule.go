// Package egressrule is the syntax and meaning of what a function says about where its jail
// may connect to through the egress proxy: the host names of a `network: proxy` allowlist and
// of a sealed secret, and its `egress: <METHOD|*> <host>[/<path glob>]` lines. Package egress
// applies them; what loads functions checks them with Check, so that a bad line fails when its
// function loads. It imports nothing of the host's, so that checking a rule does not compile
// the proxy.
package egressrule

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
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

// Compiled is a checked Rule, ready to match requests.
type Compiled struct {
	Rule
	Host Pattern
	path *regexp.Regexp // nil: any path
}

// MatchesPath reports whether the rule's path glob matches path ("" in the rule: any path).
func (c Compiled) MatchesPath(path string) bool { return c.path == nil || c.path.MatchString(path) }

// ruleMethod is a method token (RFC 9110) or "*".
var ruleMethod = regexp.MustCompile(`^(\*|[A-Z][A-Z-]*)$`)

// Compile checks r and compiles it; the error says what is wrong with it.
func Compile(r Rule) (Compiled, error) {
	c := Compiled{Rule: r}
	if !ruleMethod.MatchString(r.Method) {
		return c, errors.New("the method must be an upper-case HTTP method such as GET or POST, or *")
	}
	p, err := ParsePattern(r.Host)
	if err != nil {
		return c, err
	}
	if p.Port != 0 {
		return c, errors.New("a rule names a host without a port; the port is the allowlist's")
	}
	c.Host = p
	if r.Path != "" {
		if c.path, err = compileGlob(r.Path); err != nil {
			return c, err
		}
	}
	return c, nil
}

// Check reports whether r is a rule the proxy can apply, with the reason if not: the
// annotations' loader calls it, so that a bad line fails when its function loads.
func Check(r Rule) error {
	_, err := Compile(r)
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

// Pattern is one host of an allowlist, a sealed secret or a rule.
type Pattern struct {
	Name     string // without "*."; an IPv4 literal matches only itself
	Wildcard bool   // matches names strictly below Name
	Port     uint16 // 0: the default ports
}

// ParsePattern accepts "api.example.com" and "*.example.com", either with ":port", in any
// case, and IPv4 literals.
func ParsePattern(s string) (Pattern, error) {
	var p Pattern
	s = strings.ToLower(strings.TrimSpace(s))
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		port, err := ParsePort(s[i+1:])
		if err != nil {
			return p, errors.New("bad port; use 1 to 65535")
		}
		p.Port, s = port, s[:i]
	}
	if rest, ok := strings.CutPrefix(s, "*."); ok {
		p.Wildcard, s = true, rest
	}
	if ip, err := netip.ParseAddr(s); err == nil && ip.Is4() && !p.Wildcard {
		p.Name = ip.String()
		return p, nil
	}
	name, err := NormalizeName(s)
	if err != nil || name != s {
		return p, errors.New("not a host name; use a name like api.example.com or *.example.com, with an optional :port")
	}
	p.Name = name
	return p, nil
}

// MatchesHost reports whether p names host (a normalized name or IP literal).
func (p Pattern) MatchesHost(host string) bool {
	if p.Wildcard {
		return strings.HasSuffix(host, "."+p.Name)
	}
	return host == p.Name
}

// String is p as a function writes it.
func (p Pattern) String() string {
	s := p.Name
	if p.Wildcard {
		s = "*." + s
	}
	if p.Port != 0 {
		s += ":" + strconv.Itoa(int(p.Port))
	}
	return s
}

// ParsePort parses a port number from 1 to 65535.
func ParsePort(p string) (uint16, error) {
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 || p[0] == '+' {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", p)
	}
	return uint16(n), nil
}

// NormalizeName lower-cases a DNS name, drops a trailing dot and checks its syntax. Names
// whose last label is numeric are refused: real top-level domains are not, and C resolvers
// read "127.1" or "0x7f000001" as addresses.
func NormalizeName(host string) (string, error) {
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if name == "" || len(name) > 253 {
		return "", fmt.Errorf("%q is not a host name", host)
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if !validLabel(l) {
			return "", fmt.Errorf("%q is not a host name", host)
		}
	}
	last := labels[len(labels)-1]
	if strings.Trim(last, "0123456789") == "" || strings.HasPrefix(last, "0x") {
		return "", fmt.Errorf("%q is neither an IP address nor a host name", host)
	}
	return name, nil
}

// validLabel accepts letters, digits, '-' (not at either end) and '_',
// which real names use although RFC 1123 does not allow it.
func validLabel(l string) bool {
	if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
