package packages

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestExtractImports(t *testing.T) {
	cases := []struct {
		name string
		src  string
		want []string
	}{
		{"claude template", `import { query } from "@anthropic-ai/claude-agent-sdk";
import * as fs from "fs";
import * as path from "path";

export async function main(prompt: string) {
  for await (const m of query({ prompt })) { console.log(m); }
}`, []string{"@anthropic-ai/claude-agent-sdk", "fs", "path"}},
		{"forms", `
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
const j = module.require("j");
const k = import.meta.require("k");
import l = require("l");
import from, { w } from "from-default";
import type from "type-default";
import json from "./data.json" with { type: "json" };
const dyn = import("dyn", { with: { type: "json" } });
`, []string{"a", "b", "c", "d/sub/path.js", "side-effect", "e", "f", "g", "h", "i", "j", "k", "l", "from-default", "type-default", "./data.json", "dyn"}},
		{"type only", `import type { T } from "types-only";
import type * as TT from "types-ns";
export type { U } from "types-reexport";
import { type V, real } from "mixed";`, []string{"mixed"}},
		{"comments and strings", `// import x from "commented"
/* import y from "block";
   require("block2") */
const s = "import z from 'in-string'";
const t = 'require("in-single")';
const u = ` + "`import a from \"in-template\" ${require(\"in-subst\")} and ${ {a: 1}.a } tail`" + `;
import real from "real"; // import no from "trailing"
`, []string{"in-subst", "real"}},
		{"not imports", `obj.import("nope"); x.require("nope2"); const o = { import: "nope3" };
require.resolve("nope4"); const r = require(name); import(name);
export { a, b }; export default foo; export const c = 1;
if (import.meta.main) {}`, nil},
		{"regex and division", `const re = /"/g; const d = a / b / c;
import after from "after-regex";
const re2 = /[/"]+/; const x = (1) / 2; require("after-div");`, []string{"after-regex", "after-div"}},
		{"shebang", "#!/usr/bin/env bun\nimport x from \"x\";", []string{"x"}},
		{"jsx text with quote", "const el = <div>Don't stop</div>;\nimport y from \"y\";", []string{"y"}},
		{"unterminated string", "const s = \"oops\nimport z from \"z\";", []string{"z"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := extractImports(c.src)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("extractImports =\n %q\nwant\n %q", got, c.want)
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
		// Builtins and everything else that needs no install.
		"fs": "", "fs/promises": "", "path": "", "path/posix": "", "child_process": "", "crypto": "",
		"node:fs": "", "node:test": "", "node:sqlite": "", "bun": "", "bun:sqlite": "", "bun:test": "",
		"ws": "", "undici": "", "stream/web": "", "util/types": "", "worker_threads": "",
		"./local": "", "../up": "", "/abs/path": "", ".": "", "#internal": "",
		"https://esm.sh/x": "", "file:///x": "", "npm:foo": "", "data:text/javascript,1": "",
		"@scope": "", "@scope/": "", "": "", "has space": "", "bad!name": "",
	}
	for spec, want := range cases {
		got, ok := PackageName(spec)
		if ok != (want != "") || got != want {
			t.Errorf("PackageName(%q) = %q, %v; want %q", spec, got, ok, want)
		}
	}
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
	got, err := bareImports(code, "main.ts")
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
		{"py comments only", map[string]string{"main.py": "", "requirements.txt": "# nothing\n\n--index-url https://x\n"}, "main.py", false, "", false},
		{"py no requirements", map[string]string{"main.py": ""}, "main.py", false, "", false},
		{"bash", map[string]string{"main.sh": "echo", "requirements.txt": "x", "package.json": `{"dependencies":{"a":"1"}}`}, "main.sh", false, "", false},
		{"missing entry", map[string]string{}, "main.ts", false, "", true},
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
