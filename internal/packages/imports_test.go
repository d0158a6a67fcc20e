package packages

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/agenthost/host/internal/runtimes"
)

// scannerT starts a scanner for a test, or skips it without Bun.
func scannerT(t testing.TB) *scanner {
	t.Helper()
	bun := needTool(t, "bun")
	sc, err := startScanner(context.Background(), bun)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sc.close)
	return sc
}

func TestScan(t *testing.T) {
	cases := []struct {
		name   string
		loader string
		src    string
		want   []string
	}{
		{"claude template", "ts", `import { query } from "@anthropic-ai/claude-agent-sdk";
import * as fs from "fs";
import * as path from "path";

export async function main(prompt: string) {
  for await (const m of query({ prompt })) { console.log(m); }
}`, []string{"@anthropic-ai/claude-agent-sdk", "fs", "path"}},
		// Bun reports static imports first, then the others, each in order.
		{"forms", "ts", `
import def from 'a'
import def2, { x as y, "q-r" as z } from "b";
import * as ns from "c";
import {
  m1,
  m2,
} from "d/sub/path.js";
import "side-effect";
export { e1 } from "e";
export * from "f";
export * as g from "g";
const h = await import("h");
const i = require("i");
import l = require("l");
import from, { w } from "from-default";
import type from "type-default";
import json from "./data.json" with { type: "json" };
const dyn = import("dyn", { with: { type: "json" } });
console.log(def, def2, y, z, ns, m1, m2, from, w, type, json, l);
`, []string{"a", "b", "c", "d/sub/path.js", "side-effect", "e", "f", "g", "h", "i", "l", "from-default", "type-default", "./data.json", "dyn"}},
		{"type only", "ts", `import type { T } from "types-only";
import type * as TT from "types-ns";
export type { U } from "types-reexport";
import { type V, real } from "mixed";
import { type W } from "only-type-specifiers";`, []string{"mixed"}},
		{"comments and strings", "ts", `// import x from "commented"
/* import y from "block";
   require("block2") */
const s = "import z from 'in-string'";
const t = 'require("in-single")';
const u = ` + "`import a from \"in-template\" ${require(\"in-subst\")} and ${ {a: 1}.a } tail`" + `;
import real from "real"; // import no from "trailing"
`, []string{"in-subst", "real"}},
		{"not imports", "ts", `obj.import("nope"); x.require("nope2"); const o = { import: "nope3" };
require.resolve("nope4"); const r = require(name); import(name);
export { a, b }; export default foo; export const c = 1;
if (import.meta.main) {}`, nil},
		{"regex and division", "js", `const re = /"/g; const d = a / b / c;
import after from "after-regex";
const re2 = /[/"]+/; const x = (1) / 2; require("after-div");`, []string{"after-regex", "after-div"}},
		{"shebang", "ts", "#!/usr/bin/env bun\nimport x from \"x\";", []string{"x"}},
		// JSX compiles to calls into React's JSX runtime, which the run then
		// imports: Bun says so.
		{"jsx text with quote", "tsx", "const el = <div>Don't stop</div>;\nimport y from \"y\";", []string{"y", "react/jsx-dev-runtime", "react"}},
		{"jsx in a .js file", "jsx", "import y from \"y\";\nexport const el = <div>{y}</div>;", []string{"y", "react/jsx-dev-runtime", "react"}},
		{"commonjs", "js", "const a = require('a');\nmodule.exports = { main: () => a };", []string{"a"}},
	}
	sc := scannerT(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := sc.scan("main", c.loader, []byte(c.src))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 {
				got = nil
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("scan =\n %q\nwant\n %q", got, c.want)
			}
		})
	}
}

// TestScanSyntaxError: a file that does not parse is a definition error
// naming the file, line and column, and the scanner goes on serving.
func TestScanSyntaxError(t *testing.T) {
	cases := []struct {
		name, loader, src, want string
	}{
		{"ts", "ts", "import x from \"x\";\nexport function main(name: string {\n}\n", `SyntaxError: Expected ")" but found "{" (lib/a.ts:2:35) and 1 more`},
		{"jsx in .ts", "ts", "const el = <div>Don't stop</div>;", "(lib/a.ts:1:"},
		{"unterminated string", "js", "const s = \"oops\nimport z from \"z\";", "SyntaxError: "},
		{"types in .mjs", "js", "export function main(a: string) {}", "(lib/a.ts:1:"},
	}
	sc := scannerT(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := sc.scan("lib/a.ts", c.loader, []byte(c.src))
			var def *runtimes.DefinitionError
			if !errors.As(err, &def) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "lib/a.ts does not parse") {
				t.Fatalf("scan error = %v; want a DefinitionError with %q", err, c.want)
			}
			if got, err := sc.scan("b.ts", "ts", []byte(`import "after";`)); err != nil || !reflect.DeepEqual(got, []string{"after"}) {
				t.Errorf("scan after the error = %q, %v", got, err)
			}
		})
	}
}

func TestPackageName(t *testing.T) {
	cases := map[string]string{
		"@anthropic-ai/claude-agent-sdk":       "@anthropic-ai/claude-agent-sdk",
		"@anthropic-ai/claude-agent-sdk/sub/x": "@anthropic-ai/claude-agent-sdk",
		"lodash":                               "lodash",
		"lodash/fp":                            "lodash",
		"is-number":                            "is-number",
		"JSONStream":                           "JSONStream",
		"test":                                 "test", // only node:test is a builtin
		// Builtins (as Bun lists them) and everything else that needs no install.
		"fs": "", "fs/promises": "", "path": "", "path/posix": "", "child_process": "", "crypto": "",
		"node:fs": "", "node:test": "", "node:sqlite": "", "bun": "", "bun:sqlite": "", "bun:test": "",
		"ws": "", "undici": "", "stream/web": "", "util/types": "", "worker_threads": "",
		"./local": "", "../up": "", "/abs/path": "", ".": "", "#internal": "",
		"https://esm.sh/x": "", "file:///x": "", "npm:foo": "", "data:text/javascript,1": "",
		"@scope": "", "@scope/": "", "": "", "has space": "", "bad!name": "",
		strings.Repeat("a", 215): "",
	}
	sc := scannerT(t)
	for spec, want := range cases {
		got, ok := packageName(spec, sc.builtins)
		if ok != (want != "") || got != want {
			t.Errorf("packageName(%q) = %q, %v; want %q", spec, got, ok, want)
		}
	}
}

// FuzzPackageName: whatever the specifier, a name that comes out is one npm
// accepts and no built-in, since it goes on a package.json installed
// outside the jail.
func FuzzPackageName(f *testing.F) {
	for _, s := range []string{"lodash/fp", "@scope/name/sub", "node:fs", "fs/promises", "../x", "@a/", "a b", "#x", "bun:sqlite"} {
		f.Add(s)
	}
	builtin := map[string]bool{"fs": true, "fs/promises": true, "bun": true}
	f.Fuzz(func(t *testing.T, spec string) {
		name, ok := packageName(spec, builtin)
		if !ok {
			return
		}
		if !npmName.MatchString(name) || len(name) > maxNameLen || builtin[name] || !strings.HasPrefix(spec, name) {
			t.Errorf("packageName(%q) = %q", spec, name)
		}
	})
}

// FuzzScan: Bun's answer to any text is a list of imports or a definition
// error, and the scanner keeps serving after either.
func FuzzScan(f *testing.F) {
	for _, s := range []string{
		"import x from \"x\";",
		"const s = `${require(\"a\")}`;",
		"export function main(name: string {",
		"import(\"\\u0000\");",
		"\xff\xfe import \"bad-utf8\"",
		"const el = <div>Don't</div>;",
	} {
		f.Add(s)
	}
	sc := scannerT(f)
	f.Fuzz(func(t *testing.T, src string) {
		_, err := sc.scan("f.ts", "ts", []byte(src))
		var def *runtimes.DefinitionError
		if err != nil && !errors.As(err, &def) {
			t.Fatalf("scan(%q): %v", src, err)
		}
	})
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBareImportsFollowsLocalModules(t *testing.T) {
	root := t.TempDir()
	code := filepath.Join(root, "fn")
	writeFiles(t, root, map[string]string{
		"fn/main.ts":        `import { a } from "./lib/a.js"; import b from "./lib/b"; import "./dir"; import "../outside"; import fs from "node:fs"; import z from "zeta";`,
		"fn/lib/a.ts":       `export { x } from "alpha/sub"; import "./a.js"; export const a = 1;`,
		"fn/lib/b.mjs":      `import beta from "@scope/beta/deep"; export default beta;`,
		"fn/dir/index.tsx":  `const g = require("gamma");`,
		"fn/unused.ts":      `import "not-reached";`,
		"outside.ts":        `import "outside-pkg";`,
		"fn/lib/data.json":  `{}`,
		"fn/lib/notjs.d.ts": `import "dts";`,
	})
	got, err := bareImports(context.Background(), needTool(t, "bun"), code, "main.ts")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"@scope/beta", "alpha", "gamma", "zeta"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("bareImports = %q, want %q", got, want)
	}
}

func TestNeeds(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		entry string
		need  bool
		kind  Kind
		err   bool
	}{
		{"ts builtins only", map[string]string{"main.ts": `import fs from "fs"; import {$} from "bun";`}, "main.ts", false, "", false},
		{"ts bare import", map[string]string{"main.ts": `import x from "is-number";`}, "main.ts", true, Bun, false},
		{"js require", map[string]string{"main.cjs": `const x = require("is-number");`}, "main.cjs", true, Bun, false},
		{"package.json deps", map[string]string{"main.ts": `export const main = () => 1;`, "package.json": `{"dependencies":{"is-number":"7.0.0"}}`}, "main.ts", true, Bun, false},
		{"package.json without deps falls back to imports", map[string]string{"main.ts": `import x from "is-number";`, "package.json": `{"type":"module"}`}, "main.ts", true, Bun, false},
		{"package.json without deps, no imports", map[string]string{"main.ts": `export {}`, "package.json": `{"type":"module","devDependencies":{"x":"1"}}`}, "main.ts", false, "", false},
		{"bad package.json", map[string]string{"main.ts": `export {}`, "package.json": `{`}, "main.ts", false, "", true},
		{"py requirements", map[string]string{"main.py": "def main(): pass\n", "requirements.txt": "# c\nrequests==2.0  # pinned\n"}, "main.py", true, Pip, false},
		{"py comments only", map[string]string{"main.py": "", "requirements.txt": "# nothing\n\n--pre\n"}, "main.py", false, "", false},
		// The index is the operator's (serve --pip-index-url), never the function's.
		{"py index option", map[string]string{"main.py": "", "requirements.txt": "# nothing\n\n--index-url https://x\n"}, "main.py", false, "", true},
		{"py no requirements", map[string]string{"main.py": ""}, "main.py", false, "", false},
		{"bash", map[string]string{"main.sh": "echo", "requirements.txt": "x", "package.json": `{"dependencies":{"a":"1"}}`}, "main.sh", false, "", false},
		{"missing entry", map[string]string{}, "main.ts", false, "", true},
		{"ts syntax error", map[string]string{"main.ts": `import x from "is-number";
export function main(a: string {}`}, "main.ts", false, "", true},
		{"syntax error in a local module", map[string]string{"main.ts": `import "./lib";`, "lib.ts": `const = 1;`}, "main.ts", false, "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, c.files)
			need, kind, err := Needs(dir, c.entry)
			if (err != nil) != c.err || need != c.need || kind != c.kind {
				t.Errorf("Needs = %v, %q, %v; want %v, %q, err %v", need, kind, err, c.need, c.kind, c.err)
			}
		})
	}
}

func TestRequirementNames(t *testing.T) {
	got := requirementNames([]byte("# top\nrequests>=2 ; python_version>'3'\n-r other.txt\nnumpy[extra]==1.0\nfoo @ https://x/foo.whl\nbar#notacomment\n  baz  # c\n"))
	want := []string{"requests", "numpy", "foo", "bar#notacomment", "baz"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("requirementNames = %q, want %q", got, want)
	}
}

// TestSeedFunctions: the example functions parse, and their npm imports are
// found as they always were.
func TestSeedFunctions(t *testing.T) {
	bun := needTool(t, "bun")
	cases := map[string][]string{
		"claude.ts":    {"@anthropic-ai/claude-agent-sdk"},
		"codex.ts":     {},
		"opencode.ts":  {},
		"wordcount.ts": {},
	}
	for entry, want := range cases {
		got, err := bareImports(context.Background(), bun, "../../functions", entry)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("bareImports(%s) = %q, %v; want %q", entry, got, err, want)
		}
	}
}
