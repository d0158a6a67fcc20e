// Package check finds, before anything runs, the mistakes that would make a function fail on
// its first run: code that does not compile or parse, and a missing main.
package check

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/packages"
	"github.com/agenthost/host/internal/runtimes"
)

// Options name the interpreters a check uses; empty ones are looked up on the PATH.
type Options struct {
	Python string
	Bun    string
	Bash   string
}

// Function checks one loaded function's entry file with the tool of its runtime. The error
// names the file (and line where known) and says what to do.
func Function(ctx context.Context, f *functions.Function, o Options) error {
	entry := f.Root
	if f.Folder {
		entry = filepath.Join(f.Root, f.Entry)
	}
	// Each message names the entry file itself, so it is not wrapped in one more prefix.
	switch f.Runtime {
	case runtimes.Python:
		return python(ctx, or(o.Python, "python3"), entry)
	case runtimes.Bun:
		return bun(ctx, o.Bun, entry)
	case runtimes.Bash:
		return bash(ctx, or(o.Bash, "bash"), entry)
	}
	return nil
}

func or(s, def string) string {
	if s != "" {
		return s
	}
	return def
}

// pyCheck compiles the file without writing __pycache__ (compile() only builds the code
// object) and looks for a top-level main, as shim.py calls it: defined, imported or assigned
// (main = make_handler()). It prints one JSON line.
const pyCheck = `
import ast, json, sys
p = sys.argv[1]
src = open(p, "rb").read()
try:
    tree = compile(src, p, "exec", ast.PyCF_ONLY_AST)
    compile(tree, p, "exec")
except SyntaxError as e:
    print(json.dumps({"error": e.msg, "line": e.lineno or 0, "col": e.offset or 0}))
    sys.exit(0)
def defines_main(n):
    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return n.name == "main"
    if isinstance(n, (ast.Import, ast.ImportFrom)):
        return any((a.asname or a.name) == "main" for a in n.names)
    if isinstance(n, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == "main" for t in n.targets)
    return False
main = any(defines_main(n) for n in tree.body)
print(json.dumps({"main": main}))
`

func python(ctx context.Context, py, path string) error {
	out, err := run(ctx, py, "-I", "-B", "-c", pyCheck, path)
	if err != nil {
		return err
	}
	var r struct {
		Error string `json:"error"`
		Line  int    `json:"line"`
		Col   int    `json:"col"`
		Main  bool   `json:"main"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return fmt.Errorf("check with %s: unexpected output %q: %w", py, out, err)
	}
	if r.Error != "" {
		return &runtimes.DefinitionError{Message: fmt.Sprintf("%s:%d:%d: SyntaxError: %s; fix it, then run `host check` again", path, r.Line, r.Col, r.Error)}
	}
	if !r.Main {
		return &runtimes.DefinitionError{Message: fmt.Sprintf("%s defines no top-level main: add `def main(...):` (or `async def main`), which the host calls with the payload", path)}
	}
	return nil
}

func bun(ctx context.Context, bunPath, path string) error {
	exports, err := packages.Exports(ctx, bunPath, path)
	var def *runtimes.DefinitionError
	if errors.As(err, &def) {
		return fmt.Errorf("%w; fix it, then run `host check` again", err)
	}
	if err != nil {
		return err
	}
	if slices.Contains(exports, "main") || slices.Contains(exports, "default") {
		return nil
	}
	// CommonJS (module.exports = { main }) exports nothing Bun's scan can see: the shim
	// finds its main at run time.
	if src, err := os.ReadFile(path); err == nil && len(exports) == 0 && bytes.Contains(src, []byte("exports")) {
		return nil
	}
	return &runtimes.DefinitionError{Message: fmt.Sprintf("%s exports no main: add `export function main(...)` (or `export async function main`), which the host calls with the payload", path)}
}

func bash(ctx context.Context, sh, path string) error {
	cmd := exec.CommandContext(ctx, sh, "-n", path)
	out, err := cmd.CombinedOutput()
	if _, exited := err.(*exec.ExitError); exited {
		return &runtimes.DefinitionError{Message: fmt.Sprintf("%s; fix it, then run `host check` again", strings.TrimSpace(string(out)))}
	}
	if err != nil {
		return fmt.Errorf("check with %s -n: %w", sh, err)
	}
	return nil
}

// run runs a checker and returns its stdout; a checker that fails is reported with its stderr.
func run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("check with %s: %w: %s (is it installed?)", name, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
