package dashboard

import (
	"context"
	"testing"

	"github.com/agenthost/host/internal/check"
	"github.com/agenthost/host/internal/functions"
)

// A draft's problems name its file and line, as `host check` finds them, for each runtime:
// Python's and Bun's parsers, bash -n, and a bad annotation; a good draft has none.
func TestDraftProblemsNameFileAndLine(t *testing.T) {
	cases := []struct {
		ext, src string
		line     int
		file     string
	}{
		{".py", "def main(:\n    return 1\n", 1, "d.py"},
		{".ts", "export function main() {\n  return 1 +;\n}\n", 2, "d.ts"},
		{".sh", "echo hi\nif true; then\necho\n", 4, "d.sh"},
		{".py", "# timeout: soon\ndef main():\n    return 1\n", 1, "d.py"},
		{".py", "def main():\n    return 1\n", 0, "d.py"},
	}
	for _, c := range cases {
		dr, err := loadDraft(context.Background(), "d", nil, c.ext, c.src, func(ctx context.Context, f *functions.Function) error {
			return check.Function(ctx, f, check.Options{})
		})
		if err != nil {
			t.Fatal(err)
		}
		defer dr.remove()
		if c.line == 0 {
			if len(dr.problems) != 0 || dr.fn == nil {
				t.Fatalf("%s: a good draft has problems %+v", c.ext, dr.problems)
			}
			continue
		}
		if len(dr.problems) == 0 || dr.fn != nil {
			t.Fatalf("%s %q: no problem found", c.ext, c.src)
		}
		p := dr.problems[0]
		if p.File != c.file || p.Line != c.line || p.Message == "" || p.Text == "" {
			t.Fatalf("%s %q: problem %+v, want %s line %d with a message", c.ext, c.src, p, c.file, c.line)
		}
		t.Logf("%s: %s:%d %s", c.ext, p.File, p.Line, p.Message)
	}
}
