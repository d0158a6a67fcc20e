package functions

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEgressRuleGlobCheckedAtLoad: a path glob the proxy could not apply refuses the function at
// its line, as the annotation's other mistakes do, not at its first request.
func TestEgressRuleGlobCheckedAtLoad(t *testing.T) {
	cases := map[string]string{
		"/repos/acme**": `"**" must be a whole segment`,
		"/a/../b":       ". or .. segments",
		"/a%2Fb":        `may not hold '%'`,
	}
	for glob, want := range cases {
		path := filepath.Join(t.TempDir(), "f.sh")
		src := "# sandbox\n# network: proxy\n# egress: GET api.example.com" + glob + "\necho '{}'\n"
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := LoadPath(path)
		if err == nil || !strings.Contains(err.Error(), path+":3:") || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want %s:3 saying %q", glob, err, path, want)
		}
	}
}
