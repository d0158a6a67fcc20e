package functions

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRefusalSaysItOnce: a refused file's message names the file once and does not say
// "refused" itself, since whoever reports it does (`refused: ...`, "function refused").
func TestRefusalSaysItOnce(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		file, src, want string
	}{
		{"f.py", "# volum: x y\ndef main():\n  return 1\n", "f.py:1: unknown annotation \"volum:\""},
		{"Bad.sh", "echo hi\n", "Bad.sh: function name \"Bad\" must match"},
		{"x.weird", "nothing\n", "x.weird: unsupported file"},
		{"route.sh", "# next: agent.run.a if result.n ==\necho\n", "route.sh:1: next: agent.run.a if result.n ==: ERROR"},
		{"limit.sh", "# limit: 1 per args.repo ==\necho\n", "limit.sh:1: limit: 1 per args.repo ==: ERROR"},
		{"push.sh", "# debounce: 2s by args.key ==\necho\n", "push.sh:1: debounce: 2s by args.key ==: ERROR"},
		{"prio.sh", "# priority: 11\necho\n", "prio.sh:1: priority: 11 gave 11; a priority is a whole number from 1 to 10"},
		{"prio.sh", "# priority: 0\necho\n", "prio.sh:1: priority: 0 gave 0; a priority is a whole number from 1 to 10"},
		{"prio.sh", "# priority: args.p +\necho\n", "prio.sh:1: priority: args.p +: ERROR"},
		{"each.py", "# retries: 1\n# next: agent.run.a each 'x' + 'y'\ndef main():\n  return 1\n", "each.py:2: next: agent.run.a each 'x' + 'y': it gives string"},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join(dir, tc.file)
			if err := os.WriteFile(path, []byte(tc.src), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := LoadPath(path)
			if err == nil {
				t.Fatalf("%s loaded; want it refused", tc.file)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.want) {
				t.Errorf("message %q lacks %q", msg, tc.want)
			}
			if n := strings.Count(msg, path); n != 1 {
				t.Errorf("message %q names %s %d times; want once", msg, path, n)
			}
			if strings.Contains(msg, "refused") {
				t.Errorf("message %q says refused; the caller does", msg)
			}
		})
	}
}
