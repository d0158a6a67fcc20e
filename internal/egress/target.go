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

	"github.com/agenthost/host/internal/egressrule"
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
	n, err := egressrule.ParsePort(p)
	if err != nil {
		return 0, badRequest("%v", err)
	}
	return n, nil
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

// normalizeName is egressrule.NormalizeName, its refusal a bad request.
func normalizeName(host string) (string, error) {
	name, err := egressrule.NormalizeName(host)
	if err != nil {
		return "", badRequest("%v", err)
	}
	return name, nil
}

// allowlist is a `network: proxy` line.
type allowlist []egressrule.Pattern

// parseAllowlist accepts what internal/annot accepts ("api.example.com",
// "*.example.com", either with ":port"), in any case, plus IPv4 literals.
func parseAllowlist(entries []string) (allowlist, error) {
	var al allowlist
	for _, e := range entries {
		p, err := egressrule.ParsePattern(e)
		if err != nil {
			return nil, fmt.Errorf("egress: allowlist entry %q: %w", e, err)
		}
		al = append(al, p)
	}
	return al, nil
}

// matchesPort reports whether p lets port be reached: its own, or the default ports.
func matchesPort(p egressrule.Pattern, port uint16) bool {
	if p.Port == 0 {
		return slices.Contains(defaultPorts, port)
	}
	return p.Port == port
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
		if p.MatchesHost(t.host) {
			if matchesPort(p, t.port) {
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
		parts[i] = p.String()
	}
	return strings.Join(parts, " ")
}
