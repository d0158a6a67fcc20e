package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// defaultPorts are reachable on any allowed host; see the package comment.
var defaultPorts = []uint16{80, 443}

// target is where a client asked to go, validated and normalized.
type target struct {
	host string     // lower-case name without a trailing dot, or the IP literal's canonical form
	ip   netip.Addr // valid when the client gave an IP literal
	port uint16
}

func (t target) String() string { return net.JoinHostPort(t.host, strconv.Itoa(int(t.port))) }

// errBadRequest marks errors in what the client sent (400, not 403).
var errBadRequest = errors.New("bad request")

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errBadRequest, fmt.Sprintf(format, args...))
}

// parseAuthority parses a CONNECT request's "host:port".
func parseAuthority(authority string) (target, error) {
	h, p, err := net.SplitHostPort(authority)
	if err != nil {
		return target{}, badRequest("CONNECT needs host:port, got %q", authority)
	}
	port, err := parsePort(p)
	if err != nil {
		return target{}, err
	}
	return newTarget(h, port)
}

// parseForwardURL parses the absolute-form URL of a plain-HTTP proxy request.
func parseForwardURL(u *url.URL) (target, error) {
	if u == nil || !u.IsAbs() || u.Host == "" {
		return target{}, badRequest("this is a proxy: send CONNECT host:port, or an absolute http:// URL")
	}
	switch strings.ToLower(u.Scheme) {
	case "http":
	case "https":
		return target{}, badRequest("https URLs go through CONNECT, not as plain requests")
	default:
		return target{}, badRequest("scheme %q is not proxied; only http (and CONNECT for anything else)", u.Scheme)
	}
	port := uint16(80)
	if p := u.Port(); p != "" {
		var err error
		if port, err = parsePort(p); err != nil {
			return target{}, err
		}
	}
	return newTarget(u.Hostname(), port)
}

func parsePort(p string) (uint16, error) {
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 || p[0] == '+' {
		return 0, badRequest("port %q is not a number from 1 to 65535", p)
	}
	return uint16(n), nil
}

// newTarget validates a host as sent by a client: an IP literal (without
// a zone) or a DNS name.
func newTarget(host string, port uint16) (target, error) {
	if host == "" {
		return target{}, badRequest("empty host")
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return target{}, badRequest("host %q has an IPv6 zone", host)
		}
		return target{host: ip.String(), ip: ip, port: port}, nil
	}
	name, err := normalizeName(host)
	if err != nil {
		return target{}, err
	}
	return target{host: name, port: port}, nil
}

// normalizeName lower-cases a DNS name, drops a trailing dot and checks its
// syntax. Names whose last label is numeric are refused: real top-level
// domains are not, and C resolvers read "127.1" or "0x7f000001" as
// addresses.
func normalizeName(host string) (string, error) {
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if name == "" || len(name) > 253 {
		return "", badRequest("%q is not a host name", host)
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if !validLabel(l) {
			return "", badRequest("%q is not a host name", host)
		}
	}
	last := labels[len(labels)-1]
	if strings.Trim(last, "0123456789") == "" || strings.HasPrefix(last, "0x") {
		return "", badRequest("%q is neither an IP address nor a host name", host)
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

// pattern is one entry of a `network: proxy` allowlist.
type pattern struct {
	name     string // without "*."; an IPv4 literal matches only itself
	wildcard bool   // matches names strictly below name
	port     uint16 // 0: the default ports
}

type allowlist []pattern

// parseAllowlist accepts what internal/annot accepts ("api.example.com",
// "*.example.com", either with ":port"), in any case, plus IPv4 literals.
func parseAllowlist(entries []string) (allowlist, error) {
	var al allowlist
	for _, e := range entries {
		p, err := parsePattern(e)
		if err != nil {
			return nil, fmt.Errorf("egress: allowlist entry %q: %w", e, err)
		}
		al = append(al, p)
	}
	return al, nil
}

func parsePattern(s string) (pattern, error) {
	var p pattern
	s = strings.ToLower(strings.TrimSpace(s))
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		port, err := parsePort(s[i+1:])
		if err != nil {
			return p, errors.New("bad port; use 1 to 65535")
		}
		p.port, s = port, s[:i]
	}
	if rest, ok := strings.CutPrefix(s, "*."); ok {
		p.wildcard, s = true, rest
	}
	if ip, err := netip.ParseAddr(s); err == nil && ip.Is4() && !p.wildcard {
		p.name = ip.String()
		return p, nil
	}
	name, err := normalizeName(s)
	if err != nil || name != s {
		return p, errors.New("not a host name; use a name like api.example.com or *.example.com, with an optional :port")
	}
	p.name = name
	return p, nil
}

func (p pattern) matchesHost(host string) bool {
	if p.wildcard {
		return strings.HasSuffix(host, "."+p.name)
	}
	return host == p.name
}

func (p pattern) matchesPort(port uint16) bool {
	if p.port == 0 {
		return slices.Contains(defaultPorts, port)
	}
	return p.port == port
}

// check returns "" when t is allowed, else the refusal's reason label:
// "not_allowlisted" when no entry names the host, "port" when entries name
// it but not on this port.
func (al allowlist) check(t target) string {
	if len(al) == 0 {
		if slices.Contains(defaultPorts, t.port) {
			return ""
		}
		return "port"
	}
	named := false
	for _, p := range al {
		if p.matchesHost(t.host) {
			if p.matchesPort(t.port) {
				return ""
			}
			named = true
		}
	}
	if named {
		return "port"
	}
	return "not_allowlisted"
}

// String is the allowlist as the function wrote it, for messages.
func (al allowlist) String() string {
	parts := make([]string, len(al))
	for i, p := range al {
		s := p.name
		if p.wildcard {
			s = "*." + s
		}
		if p.port != 0 {
			s += ":" + strconv.Itoa(int(p.port))
		}
		parts[i] = s
	}
	return strings.Join(parts, " ")
}
