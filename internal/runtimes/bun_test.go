package runtimes

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var bunCases = []scriptCase{
	{
		name: "ts args by name",
		file: "greet.ts",
		src: `export async function main(name: string, greeting: string = "Hello"): Promise<string> {
  return ` + "`${greeting}, ${name}!`" + `;
}
`,
		payload: `{"greeting": "Hi", "name": "Ada"}`,
		want:    `"Hi, Ada!"`,
	},
	{
		name: "ts defaults applied",
		file: "greet.ts",
		src: `export async function main(name: string, greeting = "Hello", punctuation: "!" | "." = "!") {
  return ` + "`${greeting}, ${name}${punctuation}`" + `;
}
`,
		payload: `{"name": "Ada"}`,
		want:    `"Hello, Ada!"`,
	},
	{
		name: "ts missing required argument",
		file: "greet.ts",
		src: `export async function main(name: string, greeting: string = "Hello") {
  return ` + "`${greeting}, ${name}!`" + `;
}
`,
		payload:   `{"greeting": "Hi"}`,
		wantErr:   "argument",
		errHas:    `missing required argument "name" for main(name, greeting="Hello")`,
		stderrHas: []string{`missing required argument "name"`},
	},
	{
		name: "ts extra keys ignored",
		file: "resize.ts",
		src: `export function main(width: number, height: number, keepRatio = true) {
  return { pixels: width * height, keepRatio };
}
`,
		payload: `{"width": 640, "height": 480, "format": "png", "source": {"bucket": "imgs"}}`,
		want:    `{"pixels": 307200, "keepRatio": true}`,
	},
	{
		name: "ts optional parameter without default",
		file: "welcome.ts",
		src: `export async function main(email: string, name?: string) {
  return { to: email, subject: name ? ` + "`Welcome, ${name}`" + ` : "Welcome!" };
}
`,
		payload: `{"email": "ada@example.com"}`,
		want:    `{"to": "ada@example.com", "subject": "Welcome!"}`,
	},
	{
		name: "ts destructured parameter gets the whole payload",
		file: "query.ts",
		src: `interface Query {
  table: string;
  limit?: number;
  filters?: Record<string, string>;
}

export async function main({ table, limit = 100, filters = {} }: Query) {
  const where = Object.entries(filters).map(([k, v]) => ` + "`${k} = '${v}'`" + `).join(" AND ");
  return { sql: ` + "`SELECT * FROM ${table}${where ? ` WHERE ${where}` : \"\"} LIMIT ${limit}`" + ` };
}
`,
		payload: `{"table": "users", "filters": {"status": "active"}}`,
		want:    `{"sql": "SELECT * FROM users WHERE status = 'active' LIMIT 100"}`,
	},
	{
		name: "ts arrow main with tricky signature",
		file: "notify.ts",
		src: `type Channel = "email" | "sms";
// export async function main(wrong) {} -- a comment must not fool the parser
const DEFAULT_TAGS = ["ops,alerts", "(x)"];

export const main = async <T extends object>(
  /* who */ recipient: string,
  tags: Array<string> = DEFAULT_TAGS,
  format: (s: string) => string = (s) => s.toUpperCase(),
  opts?: { channel: Channel, retries: number },
  extra: Map<string, [number, number]> = new Map(),
) => {
  return { recipient: format(recipient), tags, channel: opts?.channel ?? "email" };
};
`,
		payload: `{"recipient": "ada"}`,
		want:    `{"recipient": "ADA", "tags": ["ops,alerts", "(x)"], "channel": "email"}`,
	},
	{
		name: "ts async main awaiting timers",
		file: "poll.ts",
		src: `const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function main(attempts = 3) {
  const seen: number[] = [];
  for (let i = 1; i <= attempts; i++) {
    await sleep(5);
    console.log(` + "`attempt ${i}`" + `);
    seen.push(i);
  }
  return seen;
}
`,
		payload:   `{"attempts": 2}`,
		want:      `[1, 2]`,
		stdoutHas: []string{"attempt 1\nattempt 2\n"},
	},
	{
		name: "ts returning undefined gives null",
		file: "notify.ts",
		src: `export async function main(channel: string, text: string): Promise<void> {
  console.log(` + "`posting to #${channel}: ${text}`" + `);
}
`,
		payload:    `{"channel": "ops", "text": "deploy done"}`,
		want:       `null`,
		lastLineIs: "posting to #ops: deploy done",
	},
	{
		name: "ts nested objects",
		file: "invoice.ts",
		src: `type Item = { sku: string; qty: number; unitPrice: number };
type Order = { id: number; customer: { name: string; tags: string[] }; items: Item[] };

export async function main(order: Order, taxRate = 0.2) {
  const subtotal = order.items.reduce((s, i) => s + i.qty * i.unitPrice, 0);
  return {
    orderId: order.id,
    customer: order.customer,
    totals: { subtotal, tax: Math.round(subtotal * taxRate * 100) / 100 },
  };
}
`,
		payload: `{"order": {"id": 7, "customer": {"name": "Ada", "tags": ["vip"]}, "items": [{"sku": "A-1", "qty": 2, "unitPrice": 5}, {"sku": "B-2", "qty": 1, "unitPrice": 2.5}]}}`,
		want:    `{"orderId": 7, "customer": {"name": "Ada", "tags": ["vip"]}, "totals": {"subtotal": 12.5, "tax": 2.5}}`,
	},
	{
		name: "ts unicode",
		file: "hello.ts",
		src: `export function main(name: string) {
  console.log(` + "`héllo ${name}`" + `);
  return { greeting: ` + "`Grüß dich, ${name} 👋`" + `, codePoints: [...name].length };
}
`,
		payload:   `{"name": "Zoë 東京"}`,
		want:      `{"greeting": "Grüß dich, Zoë 東京 👋", "codePoints": 6}`,
		stdoutHas: []string{"héllo Zoë 東京"},
	},
	{
		name: "ts BigInt is not serialisable",
		file: "supply.ts",
		src: `export function main(decimals = 18) {
  return { total: 10n ** BigInt(decimals) };
}
`,
		wantErr: "result",
		errHas:  "not JSON-serialisable",
	},
	{
		name:    "ts function result is not serialisable",
		file:    "factory.ts",
		src:     "export function main() {\n  return () => 42;\n}\n",
		wantErr: "result",
		errHas:  "not JSON-serialisable",
	},
	{
		name: "ts exception in main",
		file: "charge.ts",
		src: `class PaymentError extends Error {
  name = "PaymentError";
}

function validate(amount: number) {
  if (amount <= 0) throw new PaymentError(` + "`amount must be positive, got ${amount}`" + `);
}

export async function main(amount: number) {
  console.log("validating");
  validate(amount);
  return { charged: amount };
}
`,
		payload:   `{"amount": -5}`,
		wantErr:   "script",
		errHas:    "PaymentError: amount must be positive, got -5",
		exitCode:  1,
		stdoutHas: []string{"validating"},
		stderrHas: []string{"charge.ts"},
	},
	{
		name: "ts rejection nobody awaited",
		file: "background.ts",
		src: `export async function main() {
  setTimeout(() => { Promise.reject(new TypeError("lost connection")); }, 5);
  await new Promise((r) => setTimeout(r, 200));
  return "finished";
}
`,
		wantErr:  "script",
		errHas:   "TypeError: lost connection",
		exitCode: 1,
	},
	{
		name: "ts open handles do not keep the job alive",
		file: "server.ts",
		src: `// Like a database pool or a metrics flusher left running.
const flusher = setInterval(() => console.log("flush"), 10_000);

export async function main() {
  return { flushing: Boolean(flusher) };
}
`,
		want: `{"flushing": true}`,
	},
	{
		name: "ts main that never settles",
		file: "stuck.ts",
		src: `export async function main() {
  console.log("waiting for a callback that never comes");
  await new Promise<void>(() => {});
  return "unreachable";
}
`,
		wantErr:  "script",
		errHas:   "main never finished",
		exitCode: 1,
	},
	{
		name: "ts top-level await that never settles",
		file: "stuck.ts",
		src: `await new Promise<void>(() => {});

export function main() {
  return "unreachable";
}
`,
		wantErr:  "script",
		errHas:   "the script's top-level code never finished",
		exitCode: 1,
	},
	{
		name: "ts top-level await",
		file: "config.ts",
		src: `const config = await Promise.resolve({ region: "eu-west-1" });

export default async function main(service: string) {
  return ` + "`${service}.${config.region}`" + `;
}
`,
		payload: `{"service": "billing"}`,
		want:    `"billing.eu-west-1"`,
	},
	{
		name: "ts no main",
		file: "helpers.ts",
		src: `export function handler(event: unknown) {
  return event;
}
`,
		wantErr: "definition",
		errHas:  "does not export a main function",
	},
	{
		name:    "ts main is not a function",
		file:    "config.ts",
		src:     "export const main = { debug: true };\n",
		wantErr: "definition",
		errHas:  "main is not a function (it is object)",
	},
	{
		name: "ts syntax error",
		file: "broken.ts",
		src: `export async function main(name: string {
  return name;
}
`,
		wantErr:   "definition",
		errHas:    "SyntaxError: Expected \")\" but found \"{\" (broken.ts:1:41)",
		stderrHas: []string{"broken.ts"},
	},
	{
		name: "ts missing package is not installed",
		file: "slug.ts",
		src: `import slugify from "definitely-not-a-real-package-xyz";

export function main(title: string) {
  return slugify(title);
}
`,
		payload:  `{"title": "Hello World"}`,
		wantErr:  "script",
		errHas:   "definitely-not-a-real-package-xyz",
		exitCode: 1,
	},
	{
		name: "ts sibling module import",
		file: "job.ts",
		src: `import { applyDiscount } from "./pricing";

export async function main(price: number, code?: string) {
  return applyDiscount(price, code);
}
`,
		files: map[string]string{
			"pricing.ts": `export function applyDiscount(price: number, code?: string): number {
  return code === "SAVE10" ? Math.round(price * 90) / 100 : price;
}
`,
		},
		payload: `{"price": 100, "code": "SAVE10"}`,
		want:    `90`,
	},
	{
		name: "ts large stdout is flushed before exit",
		file: "dump.ts",
		src: `export function main(rows = 20000) {
  for (let i = 0; i < rows; i++) process.stdout.write(` + "`row ${i} ${\"x\".repeat(80)}\\n`" + `);
  process.stdout.write("dump complete\n");
  return rows;
}
`,
		want:       `20000`,
		stdoutHas:  []string{"row 19999 ", "row 0 "},
		lastLineIs: "dump complete",
	},
	{
		name: "ts process.exit(0) is a normal end",
		file: "quit.ts",
		src: `export function main() {
  console.log("nothing to do");
  process.exit(0);
}
`,
		want: `null`,
	},
	{
		name: "ts process.exit with a code",
		file: "quit.ts",
		src: `export function main() {
  console.error("config missing");
  process.exit(4);
}
`,
		wantErr: "script",
		errHas:  "process.exit(4)",
	},
	{
		name: "js function with defaults",
		file: "paginate.js",
		src: `export function main(items, page = 1, perPage = 2) {
  const start = (page - 1) * perPage;
  return { page, items: items.slice(start, start + perPage), total: items.length };
}
`,
		payload: `{"items": ["a", "b", "c", "d", "e"], "page": 2}`,
		want:    `{"page": 2, "items": ["c", "d"], "total": 5}`,
	},
	{
		name: "js missing required argument",
		file: "paginate.js",
		src: `export function main(items, page = 1) {
  return items.slice(page);
}
`,
		wantErr: "argument",
		errHas:  `missing required argument "items" for main(items, page=1)`,
	},
	{
		name: "mjs arrow main",
		file: "retry.mjs",
		src: `export const main = async (url, retries = 3) => {
  return { url, retries };
};
`,
		payload: `{"url": "https://example.com"}`,
		want:    `{"url": "https://example.com", "retries": 3}`,
	},
	{
		name:    "mjs single-parameter arrow",
		file:    "upper.mjs",
		src:     "export const main = text => text.toUpperCase();\n",
		payload: `{"text": "shout"}`,
		want:    `"SHOUT"`,
	},
	{
		name: "cjs exports.main",
		file: "basename.cjs",
		src: `const path = require("node:path");

exports.main = function (file, ext = ".txt") {
  return path.basename(file, ext);
};
`,
		payload: `{"file": "/reports/2024/q1.txt"}`,
		want:    `"q1"`,
	},
	{
		name: "tsx",
		file: "render.tsx",
		src: `export function main(title: string) {
  const el = { type: "h1", props: { children: title } };
  return el;
}
`,
		payload: `{"title": "Dashboard"}`,
		want:    `{"type": "h1", "props": {"children": "Dashboard"}}`,
	},
	{
		name: "argv and cwd look normal",
		file: "where.ts",
		src: `import { basename } from "node:path";

export function main() {
  return { argv: process.argv.slice(1).map((a) => basename(a)), cwd: basename(process.cwd()) };
}
`,
		want: `{"argv": ["where.ts"], "cwd": "job"}`,
	},
}

func TestBun(t *testing.T) {
	for _, c := range bunCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := runScript(t, c, "")
			if r.kind != Bun {
				t.Fatalf("Detect = %q", r.kind)
			}
			check(t, c, r)
		})
	}
}

// TestBunSignature runs the shim's reading of main's parameters on its own,
// through one Bun process, over signatures that are easy to get wrong: each
// case is a script file that the process imports, as the shim does.
func TestBunSignature(t *testing.T) {
	cases := []struct {
		file string
		src  string
		want string // params as name, name? (optional), {} (pattern), ...rest
	}{
		{"a.ts", "export async function main(a: string, b?: number, c = 3) {}", "a, b?, c?"},
		{"a.ts", "export function main() {}", ""},
		{"a.ts", "export default async function main(x) {}", "x"},
		{"a.ts", "export async function* main(x) {}", "x"},
		{"a.ts", "export function main<T extends Record<string, number>>(x: T, y: Map<string, [a, b]> = new Map()) {}", "x, y?"},
		{"a.ts", "export const main = async (a: string, { b, c }: { b: string, c: number }) => a", "a, {}"},
		{"a.ts", "export const main = async function named(a, b = (1, 2)) {}", "a, b?"},
		{"a.ts", "export const main = x => x", "x"},
		{"a.ts", "export let main = async x => x", "x"},
		{"a.ts", "export async function main(this: void, a: string) {}", "a"},
		{"a.ts", "export async function main(a: string, ...rest: string[]) {}", "a, ...rest"},
		{"a.ts", "export async function main(a: string = `x, ${'y)'}`, b = /[,)]/g, c = 'it\\'s, ok') {}", "a?, b?, c?"},
		{"a.ts", "export async function main(\n  // (a, b,\n  a: string, /* b: number, */\n  cb: (x: number, y: number) => void = () => {},\n) {}", "a, cb?"},
		{"a.ts", "export async function main(a: number = 1 >= 0 ? 1 : 2, b: boolean = a < 3) {}", "a?, b?"},
		{"a.ts", "function helper(main) {}\nfunction main(a) {}\nexport { main };", "a"},
		{"a.ts", "const s = \"export function main(wrong) {}\";\nexport function main(right) {}", "right"},
		{"a.cjs", "exports.main = async function (a, b = 2) {}", "a, b?"},
		{"a.cjs", "module.exports.main = (a) => a", "a"},
		{"a.ts", "type Handler = (a: string) => unknown;\nexport const main: Handler = async (a) => a", "a"},
		// A function type on the const used to hide the value from a reading
		// of the source; main's own text has it.
		{"a.ts", "export const main: (a: string) => Promise<void> = async (a) => {}", "a"},
		// What changed with Bun's parsing: the optional marks of another
		// function with a parameter of the same name do not leak into main;
		// main exported under another name; `?:` in strings and regular
		// expressions; destructuring defaults; JSX; JavaScript with `?:` text.
		{"a.ts", "function helper(a?: string) {}\nexport function main(a: string, b?: string) {}", "a, b?"},
		{"a.ts", "function run(a: number, b?: string) {}\nexport { run as main };", "a, b?"},
		{"a.ts", "export function main(a = \"x?: y\", b = /c?:d/, e?: number) {}", "a?, b?, e?"},
		{"a.ts", "export function main({ a = 1 }: { a?: number } = {}, [b, c] = [1, 2], d?: string) {}", "{}, {}, d?"},
		{"a.tsx", "export function main(name?: string, n: number = 1) { return <b>{name}</b>; }", "name?, n?"},
		{"a.mjs", "// Really?: yes\nexport function main(a, b = 'c?:') {}", "a, b?"},
		{"a.ts", "export function main(\u00e9t\u00e9?: string, \u03bb: number) {}", "\u00e9t\u00e9?, \u03bb"},
	}
	dir := t.TempDir()
	var js strings.Builder
	fmt.Fprintf(&js, "import { signature } from %q;\nimport { readFileSync } from \"node:fs\";\n", testShimDir+"/shim.mjs")
	js.WriteString(`const out = [];
async function show(script, loader) {
  try {
    const m = await import(script);
    const ps = signature(m.main ?? m.default, readFileSync(script, "utf8"), loader);
    return ps === null ? null : ps.map((p) => p.rest ? "..." + p.name : p.pattern ? "{}" : p.name + (p.optional ? "?" : "")).join(", ");
  } catch (err) {
    return "error: " + err.message;
  }
}
`)
	for i, c := range cases {
		script := filepath.Join(dir, fmt.Sprintf("c%d-%s", i, c.file))
		if err := os.WriteFile(script, []byte(c.src), 0o644); err != nil {
			t.Fatal(err)
		}
		loader := map[string]string{".ts": "ts", ".tsx": "tsx", ".cjs": "js", ".mjs": "js"}[filepath.Ext(c.file)]
		fmt.Fprintf(&js, "out.push(await show(%q, %q));\n", script, loader)
	}
	js.WriteString("console.log(JSON.stringify(out));\n")

	cmd := &Command{Argv: []string{"bun", "-e", js.String()}}
	out := runOutput(t, cmd)
	var got []*string
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("bad output %q: %v", out, err)
	}
	if len(got) != len(cases) {
		t.Fatalf("got %d results for %d cases", len(got), len(cases))
	}
	for i, c := range cases {
		g := "<null>"
		if got[i] != nil {
			g = *got[i]
		}
		if g != c.want {
			t.Errorf("signature(%s: %q) = %q, want %q", c.file, c.src, g, c.want)
		}
	}
}
