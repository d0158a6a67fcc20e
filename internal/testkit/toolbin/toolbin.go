// Package toolbin finds the programs the tests start that scripts/setup builds with Go
// (Jaeger, ORY Hydra): they land in $(go env GOPATH)/bin, which a test's $PATH may lack.
package toolbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Candidates lists where name may be, in the order to try: $PATH, then $(go env GOPATH)/bin,
// then ~/go/bin. A path listed need not exist; the caller checks (and may check a version).
func Candidates(name string) []string {
	var out []string
	if p, err := exec.LookPath(name); err == nil {
		out = append(out, p)
	}
	if gp, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, d := range filepath.SplitList(strings.TrimSpace(string(gp))) {
			out = append(out, filepath.Join(d, "bin", name))
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		out = append(out, filepath.Join(home, "go", "bin", name))
	}
	return out
}
