package annot

import (
	"slices"
	"strings"
	"testing"
)

func TestParseSealed(t *testing.T) {
	spec, err := Parse("agent.ts", []byte(`// sandbox
// network: proxy api.anthropic.com api.github.com:443
// env: ANTHROPIC_API_KEY=$sealed:anthropic.apiKey@api.anthropic.com
// env: GH_TOKEN=$sealed:github/token@API.GitHub.com,uploads.github.com
// egress: GET api.github.com/repos/acme/**
// egress: * uploads.github.com
`))
	if err != nil {
		t.Fatal(err)
	}
	a, g := spec.Env[0], spec.Env[1]
	if a.Sealed == nil || a.Sealed.Ref != "anthropic.apiKey" || !slices.Equal(a.Sealed.Hosts, []string{"api.anthropic.com"}) || a.Secret != "" {
		t.Errorf("ANTHROPIC_API_KEY: %+v", a)
	}
	if g.Sealed == nil || g.Sealed.Ref != "github/token" || !slices.Equal(g.Sealed.Hosts, []string{"api.github.com", "uploads.github.com"}) {
		t.Errorf("GH_TOKEN: %+v", g)
	}
	if spec.DeclaresSecret("anthropic.apiKey") || spec.DeclaresSecret("anthropic") {
		t.Error("a sealed secret must not count as declared: callers could then pass it in plain as an argument")
	}
	want := []EgressRule{{Method: "GET", Host: "api.github.com", Path: "/repos/acme/**", Line: 5}, {Method: "*", Host: "uploads.github.com", Line: 6}}
	if !slices.Equal(spec.Egress, want) {
		t.Errorf("egress: %+v; want %+v", spec.Egress, want)
	}
}

// TestParseSealedBadInput: each bad line fails at its line, saying what to write.
func TestParseSealedBadInput(t *testing.T) {
	cases := []struct {
		name, src, want string
		line            int
	}{
		{"no host", "// sandbox\n// env: K=$sealed:anthropic\n", "names no host", 2},
		{"empty host", "// sandbox\n// env: K=$sealed:anthropic@a.example.com,,b.example.com\n", "empty entry", 2},
		{"trailing comma", "// sandbox\n// env: K=$sealed:anthropic@a.example.com,\n", "empty entry", 2},
		{"bad host", "// sandbox\n// env: K=$sealed:anthropic@not_a host\n", "not a hostname", 2},
		{"host with port", "// sandbox\n// env: K=$sealed:anthropic@api.example.com:443\n", "has a port", 2},
		{"bad key", "// sandbox\n// env: K=$sealed:../x@api.example.com\n", "not a secret name", 2},
		{"not jailed", "// env: K=$sealed:k@api.example.com\n", `add "sandbox"`, 1},
		{"network none", "// sandbox\n// network: none\n// env: K=$sealed:k@api.example.com\n", "network: none does not use", 3},
		{"network host", "// sandbox\n// network: host\n// egress: GET api.example.com\n", "network: host does not use", 3},
		{"host not reachable", "// sandbox\n// network: proxy api.other.com\n// env: K=$sealed:k@api.example.com\n", "cannot reach", 3},
		{"host not in rules", "// sandbox\n// egress: GET api.other.com\n// env: K=$sealed:k@api.example.com\n", "cannot reach", 3},
		{"egress no path or host", "// sandbox\n// egress: GET\n", "want a method and a host", 2},
		{"egress lower method", "// sandbox\n// egress: get api.example.com\n", "upper case", 2},
		{"egress port", "// sandbox\n// egress: GET api.example.com:8443/x\n", "has a port", 2},
		{"egress three fields", "// sandbox\n// egress: GET api.example.com /x\n", "want a method and a host", 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("f.ts", []byte(strings.ReplaceAll(tc.src, "#", "//")))
			if err == nil {
				t.Fatal("accepted")
			}
			var ae *Error
			if !asError(err, &ae) || ae.Line != tc.line || !strings.Contains(ae.Msg, tc.want) {
				t.Fatalf("err = %v; want line %d saying %q", err, tc.line, tc.want)
			}
		})
	}
	// Covered by a wildcard on the network: line, and by a rule: both load.
	for _, src := range []string{
		"// sandbox\n// network: proxy *.example.com\n// env: K=$sealed:k@api.example.com\n",
		"// sandbox\n// egress: POST api.example.com/v1/**\n// env: K=$sealed:k@api.example.com\n",
		"// sandbox\n// env: K=$sealed:k@api.example.com\n", // no list: any public host
	} {
		if _, err := Parse("f.ts", []byte(src)); err != nil {
			t.Errorf("%q: %v", src, err)
		}
	}
}

func asError(err error, target **Error) bool {
	if e, ok := err.(*Error); ok {
		*target = e
		return true
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if asError(e, target) {
				return true
			}
		}
	}
	return false
}
