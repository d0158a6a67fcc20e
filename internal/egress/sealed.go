package egress

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/agenthost/host/internal/egressrule"
)

// Sealed is one sealed secret of a job: the job holds Placeholder, and the proxy puts Value in
// its place in the headers of requests to Hosts, and nowhere else. Value never enters the
// jail: not its environment, files or memory.
type Sealed struct {
	Name        string // the environment variable, for log lines
	Placeholder string // what the job holds; NewPlaceholder's form
	Value       string
	Hosts       []string // names or "*.name", as in an allowlist, without ports
}

// placeholderPrefix starts every placeholder, so that the proxy can tell one in a request
// that is not the job's own (an ended job's, another job's) and refuse it.
const placeholderPrefix = "sealed-"

var placeholderRE = regexp.MustCompile(placeholderPrefix + `[0-9a-f]{32}`)

// NewPlaceholder returns a fresh placeholder: "sealed-" and 128 random bits in hex. It is
// unique to the job it is made for and worthless outside it: only that job's proxy session
// knows it.
func NewPlaceholder() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("egress: placeholder: %w", err)
	}
	return placeholderPrefix + hex.EncodeToString(b[:]), nil
}

// sealedSet is a policy's sealed secrets.
type sealedSet struct {
	secrets []Sealed
	hosts   [][]egressrule.Pattern // per secret
	own     map[string]bool
	scrub   *scrubber // what the session's sealed hosts' responses are scrubbed of
}

func compileSealed(ss []Sealed) (sealedSet, error) {
	set := sealedSet{secrets: ss, own: map[string]bool{}, scrub: newScrubber(nil)}
	for _, s := range ss {
		if !placeholderRE.MatchString(s.Placeholder) || len(s.Placeholder) != len(placeholderPrefix)+32 {
			return set, fmt.Errorf("egress: sealed %s: the placeholder is not one NewPlaceholder makes", s.Name)
		}
		if s.Value == "" {
			return set, fmt.Errorf("egress: sealed %s: the value is empty", s.Name)
		}
		if strings.ContainsAny(s.Value, "\r\n\x00") {
			return set, fmt.Errorf("egress: sealed %s: a header value cannot hold a line break or NUL", s.Name)
		}
		if len(s.Hosts) == 0 {
			return set, fmt.Errorf("egress: sealed %s: no host to send it to", s.Name)
		}
		var ps []egressrule.Pattern
		for _, h := range s.Hosts {
			p, err := egressrule.ParsePattern(h)
			if err != nil || p.Port != 0 {
				return set, fmt.Errorf("egress: sealed %s: host %q is not a host name (a port is not part of it)", s.Name, h)
			}
			ps = append(ps, p)
		}
		set.hosts = append(set.hosts, ps)
		set.own[s.Placeholder] = true
	}
	set.scrub = newScrubber(ss)
	return set, nil
}

// covers reports whether a secret is sealed for host.
func (s sealedSet) covers(host string) bool {
	for i := range s.secrets {
		if s.forHost(i, host) {
			return true
		}
	}
	return false
}

func (s sealedSet) forHost(i int, host string) bool {
	for _, p := range s.hosts[i] {
		if p.MatchesHost(host) {
			return true
		}
	}
	return false
}

// errForeignPlaceholder is a request carrying a placeholder this job does not hold.
var errForeignPlaceholder = errors.New("a header carries a sealed placeholder that is not this job's (placeholders end with their job)")

// substitute puts the real values in h, a request header on its way to host, in place of the
// placeholders of the secrets sealed for host, and returns the names of those it replaced and
// the Basic credentials it wrote (to be scrubbed exactly from what comes back). A placeholder
// in a Basic credential is replaced inside its base64. A header carrying any placeholder the
// job does not hold is refused, whatever the host: it can only be an ended job's key replayed.
func (s sealedSet) substitute(h http.Header, host string) ([]string, []basicCred, error) {
	var used []string
	var creds []basicCred
	for name, vals := range h {
		for i, v := range vals {
			nv, err := s.substituteValue(v, host, &used)
			if err != nil {
				return nil, nil, err
			}
			if name == "Authorization" || name == "Proxy-Authorization" {
				if nv, err = s.substituteBasic(nv, host, &used, &creds); err != nil {
					return nil, nil, err
				}
			}
			vals[i] = nv
		}
	}
	return used, creds, nil
}

func (s sealedSet) substituteValue(v, host string, used *[]string) (string, error) {
	if !strings.Contains(v, placeholderPrefix) {
		return v, nil
	}
	for _, ph := range placeholderRE.FindAllString(v, -1) {
		if !s.own[ph] {
			return "", errForeignPlaceholder
		}
	}
	for i, sec := range s.secrets {
		if strings.Contains(v, sec.Placeholder) && s.forHost(i, host) {
			v = strings.ReplaceAll(v, sec.Placeholder, sec.Value)
			*used = append(*used, sec.Name)
		}
	}
	return v, nil
}

// substituteBasic handles "Basic base64(user:password)", where a placeholder hides in base64.
func (s sealedSet) substituteBasic(v, host string, used *[]string, creds *[]basicCred) (string, error) {
	scheme, cred, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "basic") {
		return v, nil
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil || !strings.Contains(string(raw), placeholderPrefix) {
		return v, nil
	}
	before := len(*used)
	nv, err := s.substituteValue(string(raw), host, used)
	if err != nil || len(*used) == before {
		return v, err
	}
	*creds = append(*creds, basicCred{sent: string(raw), written: nv})
	return scheme + " " + base64.StdEncoding.EncodeToString([]byte(nv)), nil
}
