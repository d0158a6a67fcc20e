package check

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/runtimes"
)

func TestFunction(t *testing.T) {
	if _, err := exec.LookPath("bun"); err != nil {
		t.Skip("SKIPPED LOUDLY: bun is not installed; .ci/run installs it (npm install -g bun@1.4.4)")
	}
	cases := []struct {
		file, src string
		want      []string // substrings of the error; none: no error
	}{
		{"ok.py", "def main(name):\n    return name\n", nil},
		{"async.py", "async def main():\n    return 1\n", nil},
		{"imported.py", "from json import dumps as main\n", nil},
		{"assigned.py", "def make():\n    return lambda: 1\nmain = make()\n", nil},
		{"syntax.py", "def main(:\n    return 1\n", []string{"syntax.py:1:", "SyntaxError", "host check"}},
		{"nomain.py", "def helper():\n    return 1\n", []string{"nomain.py", "no top-level main", "def main"}},
		{"nested.py", "class X:\n    def main(self):\n        pass\n", []string{"no top-level main"}},
		{"ok.ts", "export async function main(a: string) { return a }\n", nil},
		{"default.mjs", "export default function main() { return 1 }\n", nil},
		{"cjs.cjs", "function main() { return 1 }\nmodule.exports = { main }\n", nil},
		{"syntax.ts", "export function main( {\n", []string{"syntax.ts:1:", "SyntaxError"}},
		{"nomain.ts", "export function helper() { return 1 }\n", []string{"nomain.ts exports no main", "export function main"}},
		{"ok.sh", "echo '{}'\n", nil},
		{"syntax.sh", "if true; then\necho\n", []string{"syntax.sh", "syntax error", "host check"}},
		{"folder/main.py", "def helper():\n    return 1\n", []string{"folder/main.py defines no top-level main"}},
		{"tsfolder/main.ts", "export function main( {\n", []string{"tsfolder/main.ts:1:"}},
		{"okfolder/main.py", "async def main():\n    return 1\n", nil},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, c.file)
			os.MkdirAll(filepath.Dir(path), 0o755)
			if err := os.WriteFile(path, []byte(c.src), 0o644); err != nil {
				t.Fatal(err)
			}
			// A folder function is loaded by its folder.
			root, _ := filepath.Rel(dir, path)
			f, err := functions.LoadPath(filepath.Join(dir, strings.Split(root, "/")[0]))
			if err != nil {
				t.Fatal(err)
			}
			err = Function(context.Background(), f, Options{})
			if c.want == nil {
				if err != nil {
					t.Fatalf("want no error, got %v", err)
				}
				return
			}
			var def *runtimes.DefinitionError
			if err == nil || !errors.As(err, &def) {
				t.Fatalf("want a definition error, got %v", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(path), "__pycache__")); err == nil {
				t.Errorf("the check wrote __pycache__ into the functions directory")
			}
		})
	}
}
