package annot

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Sealed is the "$sealed:<key>[.<field>]@<host>[,<host>...]" form of an env: value: the job
// holds a placeholder, and the host's egress proxy puts the secret in its place in the headers
// of requests to Hosts only (package egress). The secret itself never enters the jail.
type Sealed struct {
	// Ref is the secret as written: a secret's name, or a name, a dot and a field of the JSON
	// object stored under it ("anthropic.apiKey"); the host tries the whole name first.
	Ref   string
	Hosts []string // names or "*.name", lower case, without ports
}

// EgressRule is one "egress: <METHOD|*> <host>[/<path glob>]" line: what a job may send to
// host. Package egressrule checks it at load (egressrule.Check), package egress applies it.
type EgressRule struct {
	Method string // upper case, or "*"
	Host   string // a name or "*.name", lower case
	Path   string // "" for any path; else starts with "/"
	Line   int
}

const sealedPrefix = "$sealed:"

// parseSealed parses what follows "$sealed:".
func parseSealed(s string) (*Sealed, error) {
	ref, hosts, ok := strings.Cut(s, "@")
	if !ok || hosts == "" {
		return nil, fmt.Errorf("%q names no host: write $sealed:<key>[.<field>]@<host>[,<host>...], e.g. $sealed:anthropic.apiKey@api.anthropic.com", sealedPrefix+s)
	}
	if err := checkSecretKey(ref); err != nil {
		return nil, err
	}
	out := &Sealed{Ref: ref}
	for _, h := range strings.Split(hosts, ",") {
		h = strings.ToLower(strings.TrimSpace(h))
		if h == "" {
			return nil, fmt.Errorf("the host list %q has an empty entry; separate hosts with single commas", hosts)
		}
		if strings.Contains(h, ":") {
			return nil, fmt.Errorf("sealed host %q has a port; name the host only (its ports are network:'s)", h)
		}
		if err := checkHost(h); err != nil {
			return nil, err
		}
		if slices.Contains(out.Hosts, h) {
			return nil, fmt.Errorf("lists host %q twice", h)
		}
		out.Hosts = append(out.Hosts, h)
	}
	return out, nil
}

var egressMethod = regexp.MustCompile(`^(\*|[A-Z][A-Z-]*)$`)

func parseEgress(line int, value string) (EgressRule, error) {
	f := strings.Fields(value)
	if len(f) != 2 {
		return EgressRule{}, fmt.Errorf("%q: want a method and a host with an optional path", value)
	}
	if !egressMethod.MatchString(f[0]) {
		return EgressRule{}, fmt.Errorf("%q is not an HTTP method: write it in upper case (GET, POST) or * for any", f[0])
	}
	host, path := f[1], ""
	if i := strings.IndexByte(host, '/'); i >= 0 {
		host, path = host[:i], host[i:]
	}
	host = strings.ToLower(host)
	if strings.Contains(host, ":") {
		return EgressRule{}, fmt.Errorf("host %q has a port; a rule names the host only (its ports are network:'s)", host)
	}
	if err := checkHost(host); err != nil {
		return EgressRule{}, err
	}
	return EgressRule{Method: f[0], Host: host, Path: path, Line: line}, nil
}

func (p *parser) egress(line int, value string) {
	r, err := parseEgress(line, value)
	if err != nil {
		p.errorf(line, "egress: %v; %s", err, usage["egress"])
		return
	}
	p.spec.Egress = append(p.spec.Egress, r)
}

// sealedReachable checks that what sealed secrets and egress: rules need is there: a jail, the
// proxy, and for each sealed host a way to reach it (network:'s list or a rule).
func (p *parser) sealedReachable() {
	s := p.spec
	var sealedLines []Env
	for _, e := range s.Env {
		if e.Sealed != nil {
			sealedLines = append(sealedLines, e)
		}
	}
	if len(sealedLines) == 0 && len(s.Egress) == 0 {
		return
	}
	first := 0
	if len(sealedLines) > 0 {
		first = sealedLines[0].Line
	} else {
		first = s.Egress[0].Line
	}
	if !s.Sandbox {
		p.errorf(first, "sealed secrets and egress: rules are applied by the jail's egress proxy: add \"sandbox\"")
		return
	}
	if s.Network.Mode != NetworkProxy {
		p.errorf(first, "sealed secrets and egress: rules are applied by the egress proxy, which network: %s does not use: write \"network: proxy [host ...]\" (the default)",
			s.Network.Mode)
		return
	}
	listed := len(s.Network.Hosts) > 0 || len(s.Egress) > 0
	for _, e := range sealedLines {
		for _, h := range e.Sealed.Hosts {
			if !listed || p.reaches(h) {
				continue
			}
			p.errorf(e.Line, "env: %s is sealed for %s, which this function cannot reach: name it on the network: proxy line or in an egress: rule", e.Name, h)
		}
	}
}

// reaches reports whether network:'s list or an egress: rule covers host.
func (p *parser) reaches(host string) bool {
	for _, n := range p.spec.Network.Hosts {
		if i := strings.LastIndexByte(n, ':'); i >= 0 {
			n = n[:i]
		}
		if covers(n, host) {
			return true
		}
	}
	for _, r := range p.spec.Egress {
		if covers(r.Host, host) {
			return true
		}
	}
	return false
}

// covers reports whether the host pattern pat ("name" or "*.name") matches every host that
// host (a name or "*.name" too) does.
func covers(pat, host string) bool {
	if pat == host {
		return true
	}
	suffix, ok := strings.CutPrefix(pat, "*.")
	if !ok {
		return false
	}
	return strings.HasSuffix(strings.TrimPrefix(host, "*."), "."+suffix)
}
