package annot

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// The validators below return errors that read as the rest of a sentence
// starting with the annotation, e.g. `timeout: "5" is not a Go duration ...`.

func parseTimeout(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a Go duration (units ns, us, ms, s, m, h)", s)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q must be longer than zero", s)
	}
	return d, nil
}

// MaxDelay bounds `delay:`: a delayed trigger waits in the trigger stream, which keeps an
// unconsumed one 7 days.
const MaxDelay = 7 * 24 * time.Hour

func parseDelay(s string) (time.Duration, error) {
	d, err := parseTimeout(s)
	if err == nil && d > MaxDelay {
		err = fmt.Errorf("%q is longer than 7 days, longer than the trigger stream keeps a trigger", s)
	}
	return d, err
}

// minMemory is the least memory limit accepted: below it no runtime starts,
// and "memory: 512" (bytes, meant as MiB) is a likely slip worth catching.
const minMemory = 1 << 20

var (
	sizeShape = regexp.MustCompile(`^([0-9]+)(Ki|Mi|Gi|Ti|K|M|G|T)?$`)
	sizeUnits = map[string]int64{
		"":  1,
		"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
		"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
	}
)

func parseMemory(s string) (int64, error) {
	n, err := ParseSize(s)
	if err == nil && n < minMemory {
		return 0, fmt.Errorf("%q is below the minimum of 1Mi", s)
	}
	return n, err
}

// ParseSize reads a size in bytes as the annotations write one: a whole number with an
// optional suffix Ki, Mi, Gi, Ti (1024-based) or K, M, G, T (1000-based). Flags of `serve`
// that take a size read it the same way.
func ParseSize(s string) (int64, error) {
	m := sizeShape.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("%q is not a size; use a whole number with an optional suffix Ki, Mi, Gi, Ti (1024-based) or K, M, G, T (1000-based)", s)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	unit := sizeUnits[m[2]]
	if err != nil || n > math.MaxInt64/unit {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n * unit, nil
}

func parseNetwork(s string) (Network, error) {
	f := strings.Fields(s)
	mode := NetworkMode(f[0])
	switch mode {
	case NetworkNone, NetworkHost:
		if len(f) > 1 {
			return Network{}, fmt.Errorf("%s takes no hosts; only proxy has an allowlist", mode)
		}
		return Network{Mode: mode}, nil
	case NetworkProxy:
		var hosts []string
		for _, h := range f[1:] {
			h = strings.ToLower(h) // DNS names are case-insensitive
			if err := checkHost(h); err != nil {
				return Network{}, err
			}
			if slices.Contains(hosts, h) {
				return Network{}, fmt.Errorf("lists host %q twice", h)
			}
			hosts = append(hosts, h)
		}
		return Network{Mode: mode, Hosts: hosts}, nil
	}
	return Network{}, fmt.Errorf("unknown mode %q", f[0])
}

// hostLabel is one DNS label (RFC 1123: letters, digits, inner hyphens).
var hostLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// checkHost accepts "example.com", "*.example.com" and either with ":port".
func checkHost(h string) error {
	name := h
	if i := strings.LastIndexByte(h, ':'); i >= 0 {
		name = h[:i]
		port, err := strconv.Atoi(h[i+1:])
		if err != nil || port < 1 || port > 65535 || h[i+1] == '+' {
			return fmt.Errorf("host %q has a bad port; use 1 to 65535", h)
		}
	}
	bad := fmt.Errorf("host %q is not a hostname; use a name like api.example.com or *.example.com, with an optional :port", h)
	name = strings.TrimPrefix(name, "*.")
	if name == "" || len(name) > 253 {
		return bad
	}
	for label := range strings.SplitSeq(name, ".") {
		if !hostLabel.MatchString(label) {
			return bad
		}
	}
	return nil
}

func parseCount(s string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(s)
	// Atoi takes a sign; "+3" is not how anyone writes a count.
	if err != nil || s[0] == '+' || n < lo || n > hi {
		return 0, fmt.Errorf("%q is not a whole number from %d to %d", s, lo, hi)
	}
	return n, nil
}

var (
	envName   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	secretKey = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.=/-]{0,127}$`)
	// reservedEnv are set by the host for every job; letting a script
	// override them would break the job's view of itself.
	reservedEnv = []string{"HOME", "JOB_ID", "FLOW_ID", "FUNCTION"}
)

// secretPrefix marks an env value to be fetched from the secret store.
const secretPrefix = "$secret:"

// parseEnv parses "NAME=value". The value is taken literally: no quotes are
// removed and no variables expanded, except a whole "$secret:<key>".
func parseEnv(s string) (Env, error) {
	name, value, ok := strings.Cut(s, "=")
	if !ok {
		return Env{}, fmt.Errorf("%q has no \"=\"", s)
	}
	if !envName.MatchString(name) {
		return Env{}, fmt.Errorf("%q is not a variable name; use letters, digits and _, not starting with a digit", name)
	}
	if slices.Contains(reservedEnv, name) {
		return Env{}, fmt.Errorf("%s is set by the host and cannot be overridden (reserved: %s)", name, strings.Join(reservedEnv, ", "))
	}
	e := Env{Name: name, Value: value}
	if rest, ok := strings.CutPrefix(value, sealedPrefix); ok {
		sealed, err := parseSealed(rest)
		if err != nil {
			return Env{}, fmt.Errorf("%s: %w", name, err)
		}
		e.Sealed = sealed
		return e, nil
	}
	if key, ok := strings.CutPrefix(value, secretPrefix); ok {
		if err := checkSecretKey(key); err != nil {
			return Env{}, fmt.Errorf("%s: %w", name, err)
		}
		e.Secret = key
	}
	return e, nil
}

// checkSecretKey applies the secret store's name rules (secrets.ValidateName;
// not imported, to keep this package free of NATS), so that a declaration
// the store could never satisfy fails at deploy time.
func checkSecretKey(key string) error {
	if !secretKey.MatchString(key) || strings.HasSuffix(key, ".") || strings.Contains(key, "..") {
		return fmt.Errorf("secret key %q is not a secret name: use 1 to 128 characters from letters, digits and _ . = / -, "+
			"starting with a letter, digit or _, not ending with a dot and without two dots in a row", key)
	}
	return nil
}

// checkSubject checks a NATS subject: dot-separated non-empty tokens without
// whitespace, where "*" (any one token) and ">" (the rest) are allowed as
// whole tokens only, ">" only last, and only when wildcards is set.
func checkSubject(s string, wildcards bool) error {
	if i := strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }); i >= 0 {
		return fmt.Errorf("subject %q contains whitespace or a control character", s)
	}
	tokens := strings.Split(s, ".")
	for i, t := range tokens {
		switch {
		case t == "":
			return fmt.Errorf("subject %q has an empty token; separate tokens with single dots and do not start or end with one", s)
		case !wildcards && strings.ContainsAny(t, "*>"):
			return fmt.Errorf("subject %q has a wildcard; results are published to one exact subject", s)
		case t == ">" && i != len(tokens)-1:
			return fmt.Errorf("subject %q has \">\" before the last token; \">\" matches the rest of a subject, so it must come last", s)
		case t != "*" && t != ">" && strings.ContainsAny(t, "*>"):
			return fmt.Errorf("subject %q has \"*\" or \">\" inside a token; wildcards must be whole tokens, like orders.*", s)
		}
	}
	return nil
}

// maxToolDescription bounds a "tool:" description: it is sent to every model that lists the
// host's tools, in its context, on every turn.
const maxToolDescription = 1024

func parseTool(line int, value string) (*Tool, error) {
	if len(value) > maxToolDescription {
		return nil, fmt.Errorf("description has %d bytes, more than the %d a tool's may have (a model reads it on every turn)", len(value), maxToolDescription)
	}
	return &Tool{Description: value, Line: line}, nil
}
