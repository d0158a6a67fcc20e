package signature

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/runtimes"
)

// TestCheck reads main from a source and checks a payload against it: want is the whole
// message's first part, or "" for a payload the check lets through.
func TestCheck(t *testing.T) {
	const pyTop = "def main(text: str, top: int = 3):\n    pass\n"
	const tsTop = "export async function main(text: string, top: number = 3) {}\n"
	cases := []struct {
		name    string
		kind    runtimes.Kind
		src     string
		payload string
		want    string
	}{
		// Python: each checked type, accepted and refused.
		{"py int refuses a string", runtimes.Python, pyTop, `{"text":"a","top":"two"}`, `argument "top": expected int, got string "two"`},
		{"py int accepts an integer", runtimes.Python, pyTop, `{"text":"a","top":2}`, ""},
		{"py int refuses a fraction", runtimes.Python, pyTop, `{"top":2.5}`, `argument "top": expected int, got number 2.5`},
		{"py int refuses a boolean", runtimes.Python, pyTop, `{"top":true}`, `argument "top": expected int, got boolean true`},
		{"py int refuses null without a None default", runtimes.Python, pyTop, `{"top":null}`, `argument "top": expected int, got null`},
		{"py str refuses a number", runtimes.Python, pyTop, `{"text":5}`, `argument "text": expected str, got number 5`},
		{"py float accepts an integer", runtimes.Python, "def main(x: float): ...\n", `{"x":1}`, ""},
		{"py float refuses a list", runtimes.Python, "def main(x: float): ...\n", `{"x":[1]}`, `argument "x": expected float, got array`},
		{"py bool", runtimes.Python, "def main(b: bool): ...\n", `{"b":"yes"}`, `argument "b": expected bool, got string "yes"`},
		{"py list with elements", runtimes.Python, "def main(xs: list[str]): ...\n", `{"xs":{}}`, `argument "xs": expected list[str], got object`},
		{"py List from typing", runtimes.Python, "from typing import List\ndef main(xs: List[int]): ...\n", `{"xs":[1,2]}`, ""},
		{"py dict", runtimes.Python, "def main(d: dict): ...\n", `{"d":[]}`, `argument "d": expected dict, got array`},
		{"py Dict[str, int]", runtimes.Python, "def main(d: typing.Dict[str, int]): ...\n", `{"d":{"a":1}}`, ""},
		{"py Optional accepts null", runtimes.Python, "def main(n: Optional[int] = None): ...\n", `{"n":null}`, ""},
		{"py Optional refuses a string", runtimes.Python, "def main(n: Optional[int] = None): ...\n", `{"n":"1"}`, `argument "n": expected Optional[int], got string "1"`},
		{"py X | None", runtimes.Python, "def main(n: int | None): ...\n", `{"n":null}`, ""},
		{"py X | None refuses", runtimes.Python, "def main(n: int | None): ...\n", `{"n":"x"}`, `argument "n": expected int | None, got string "x"`},
		{"py Union", runtimes.Python, "def main(v: Union[int, str]): ...\n", `{"v":"x"}`, ""},
		{"py None default", runtimes.Python, "def main(n: int = None): ...\n", `{"n":null}`, ""},
		{"py forward reference", runtimes.Python, "def main(n: 'int'): ...\n", `{"n":"x"}`, `argument "n": expected 'int', got string "x"`},
		{"py async, multi-line, comments", runtimes.Python, "async def main(\n    a: str,  # the name\n    b: int = 1,\n):\n    ...\n", `{"b":"x"}`, `argument "b": expected int, got string "x"`},
		{"py every mismatch named", runtimes.Python, pyTop, `{"text":1,"top":"two"}`, `argument "text": expected str, got number 1; argument "top": expected int, got string "two"`},
		{"py last def wins", runtimes.Python, "def main(a: int): ...\ndef main(a: str): ...\n", `{"a":"x"}`, ""},
		// Python: what is not checked.
		{"py no hint", runtimes.Python, "def main(a, b=2): ...\n", `{"a":"x","b":"y"}`, ""},
		{"py a class", runtimes.Python, "def main(a: Path): ...\n", `{"a":1}`, ""},
		{"py Any", runtimes.Python, "def main(a: Any): ...\n", `{"a":1}`, ""},
		{"py decorated", runtimes.Python, "@wrap\ndef main(a: int): ...\n", `{"a":"x"}`, ""},
		{"py main assigned", runtimes.Python, "def main(a: int): ...\nmain = other\n", `{"a":"x"}`, ""},
		{"py main imported", runtimes.Python, "from lib import main\n", `{"a":"x"}`, ""},
		{"py kwargs are not typed here", runtimes.Python, "def main(**kw: int): ...\n", `{"a":"x"}`, ""},
		{"py a secret reference", runtimes.Python, "def main(key: dict): ...\n", `{"key":"$secret:anthropic"}`, ""},
		{"py a secret reference inside", runtimes.Python, "def main(keys: list[int], m: dict[str, bool]): ...\n", `{"keys":[1,"$secret:a"],"m":{"x":"$secret:b"}}`, ""},
		{"py list elements", runtimes.Python, "def main(xs: list[str]): ...\n", `{"xs":["a",1]}`, `argument "xs": expected list[str], got array (xs[1]: expected string, got number 1)`},
		{"py dict values", runtimes.Python, "def main(d: dict[str, list[int]]): ...\n", `{"d":{"a":[1],"b":[2,2.5]}}`, `argument "d": expected dict[str, list[int]], got object (d.b[1]: expected integer, got number 2.5)`},
		{"py int takes 3.0, an integer to JSON Schema", runtimes.Python, pyTop, `{"top":3.0}`, ""},
		{"py unknown keys", runtimes.Python, pyTop, `{"other":"x"}`, ""},

		// TypeScript.
		{"ts number refuses a string", runtimes.Bun, tsTop, `{"text":"a","top":"two"}`, `argument "top": expected number, got string "two"`},
		{"ts number accepts a fraction", runtimes.Bun, tsTop, `{"top":2.5}`, ""},
		{"ts string", runtimes.Bun, tsTop, `{"text":false}`, `argument "text": expected string, got boolean false`},
		{"ts boolean", runtimes.Bun, "export function main(b: boolean) {}\n", `{"b":1}`, `argument "b": expected boolean, got number 1`},
		{"ts array", runtimes.Bun, "export function main(xs: string[]) {}\n", `{"xs":"a"}`, `argument "xs": expected string[], got string "a"`},
		{"ts Array<T>", runtimes.Bun, "export function main(xs: Array<number>) {}\n", `{"xs":[1]}`, ""},
		{"ts object literal type", runtimes.Bun, "export function main(o: { a: string; b?: number }) {}\n", `{"o":"x"}`, `argument "o": expected { a: string; b?: number }, got string "x"`},
		{"ts object takes an array", runtimes.Bun, "export function main(o: object) {}\n", `{"o":[1]}`, ""},
		{"ts object refuses a string", runtimes.Bun, "export function main(o: object) {}\n", `{"o":"x"}`, `argument "o": expected object, got string "x"`},
		{"ts {} is anything", runtimes.Bun, "export function main(o: {}) {}\n", `{"o":"x"}`, ""},
		{"ts Record", runtimes.Bun, "export function main(o: Record<string, string>) {}\n", `{"o":{}}`, ""},
		{"ts optional accepts null", runtimes.Bun, "export function main(s?: string) {}\n", `{"s":null}`, ""},
		{"ts optional refuses a number", runtimes.Bun, "export function main(s?: string) {}\n", `{"s":1}`, `argument "s": expected string, got number 1`},
		{"ts | null", runtimes.Bun, "export function main(s: string | null) {}\n", `{"s":null}`, ""},
		{"ts literal union", runtimes.Bun, "export function main(m: 'a' | 'b') {}\n", `{"m":1}`, `argument "m": expected 'a' | 'b', got number 1`},
		{"ts arrow const", runtimes.Bun, "export const main = async (n: number) => n;\n", `{"n":"1"}`, `argument "n": expected number, got string "1"`},
		{"ts default export", runtimes.Bun, "export default async function main(n: number) {}\n", `{"n":"1"}`, `argument "n": expected number, got string "1"`},
		{"ts comments and function types", runtimes.Bun, "export function main(\n  /* how many */ n: number,\n  f: (x: number) => void,\n) {}\n", `{"n":"1","f":1}`, `argument "n": expected number, got string "1"`},
		{"ts backtick literal", runtimes.Bun, "export function main(m: `a` | `b` = `a`) {}\n", `{"m":"c"}`, "argument \"m\": expected `a` | `b`, got string \"c\""},
		{"ts template literal type", runtimes.Bun, "export function main(id: `user-${string}`) {}\n", `{"id":1}`, "argument \"id\": expected `user-${string}`, got number 1"},
		// Inside lists and objects: the message says where.
		{"ts object literal field", runtimes.Bun, "export function main(o: { a: string; b?: number }) {}\n", `{"o":{"a":"x","b":"2"}}`,
			`argument "o": expected { a: string; b?: number }, got object (o.b: expected number, got string "2")`},
		{"ts object literal missing field", runtimes.Bun, "export function main(o: { a: string; b?: number }) {}\n", `{"o":{}}`,
			`argument "o": expected { a: string; b?: number }, got object (o.a: missing)`},
		{"ts literal in an array", runtimes.Bun, "export function main(ms: Array<'up' | 'down'>) {}\n", `{"ms":["up","left"]}`,
			`argument "ms": expected Array<'up' | 'down'>, got array (ms[1]: expected "up" or "down", got string "left")`},
		// A one-line alias the source declares is read as what it stands for.
		{"ts a one-line alias", runtimes.Bun, "type A = string\nexport function main(a: A) {}\n", `{"a":1}`, `argument "a": expected A, got number 1`},
		// TypeScript: what is not checked.
		{"ts a generic alias", runtimes.Bun, "type A<T> = T\nexport function main(a: A) {}\n", `{"a":1}`, ""},
		{"ts any", runtimes.Bun, "export function main(a: any) {}\n", `{"a":1}`, ""},
		{"ts destructuring", runtimes.Bun, "export function main({ a }: { a: string }) {}\n", `{"a":1}`, ""},
		{"ts generic", runtimes.Bun, "export function main<T>(a: string) {}\n", `{"a":1}`, ""},
		{"ts overloads", runtimes.Bun, "export function main(a: string): void;\nexport function main(a: any) {}\n", `{"a":1}`, ""},
		{"js without types", runtimes.Bun, "export function main(a, b = 2) {}\n", `{"a":1}`, ""},
		{"ts a main in a comment only", runtimes.Bun, "// export function main(a: string) {}\nmodule.exports = { main }\n", `{"a":1}`, ""},

		// Bash has no signature.
		{"bash", runtimes.Bash, "echo hi\n", `{"a":1}`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := Read(tc.kind, []byte(tc.src)).Check([]byte(tc.payload))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v; want it let through", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("let through; want %q", tc.want)
			}
			if !strings.HasPrefix(err.Error(), tc.want+";") {
				t.Errorf("message %q; want it to start %q", err, tc.want)
			}
			var arg *runtimes.ArgumentError
			if !errors.As(err, &arg) || !jobtype.IsTerminal(err) {
				t.Errorf("%T is not a terminal argument error", err)
			}
		})
	}
}

// TestReadNothing: sources with nothing to check give no signature, so a run pays nothing.
func TestReadNothing(t *testing.T) {
	for _, src := range []string{"def main(a, b): ...\n", "", "def main(a: int\n", "export function main(a: string\n"} {
		if s := Read(runtimes.Python, []byte(src)); s != nil {
			t.Errorf("python %q: %+v; want nil", src, s)
		}
		if s := Read(runtimes.Bun, []byte(src)); s != nil {
			t.Errorf("bun %q: %+v; want nil", src, s)
		}
	}
}

// TestFields lists every named parameter for a form: checked ones with their kinds, the
// others with none, each with its default as written and whether it may be left out.
func TestFields(t *testing.T) {
	cases := []struct {
		name string
		kind runtimes.Kind
		src  string
		want string // name:accepts:default:optional, joined by " "
	}{
		{"py typed, defaulted and bare", runtimes.Python, "def main(n: int, name: str = \"world\", opts: dict | None = None, raw, *args, **kw):\n    pass\n",
			`n:2:: name:1:"world":opt opts:96:None:opt raw:0::`},
		{"py unknown type", runtimes.Python, "def main(user: User, k=3): ...\n", `user:0:: k:0:3:opt`},
		{"ts optional and default", runtimes.Bun, "export function main(n: number, tag?: string, limit = 10, o: Record<string, number>) {}\n",
			`n:4:: tag:65::opt limit:0:10:opt o:32::`},
		{"bash has none", runtimes.Bash, "echo\n", ``},
		// functions/claude.ts: an alias declared on one line is read as what it stands for;
		// one spread over lines, a generic one and a namespace's type (RT.Anthropic) are not.
		{"ts one-line alias", runtimes.Bun, "type AgentInstructions = Record<string, string>\nexport type Alias2 = AgentInstructions;\n" +
			"type Spread = {\n  a: string\n}\ntype Box<T> = T[]\nexport async function main(anthropic?: RT.Anthropic, ai?: AgentInstructions, b: Alias2, s: Spread, x: Box) {}\n",
			`anthropic:0::opt ai:96::opt b:32:: s:0:: x:0::`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, p := range Fields(c.kind, []byte(c.src)) {
				opt := ""
				if p.Optional {
					opt = "opt"
				}
				got = append(got, fmt.Sprintf("%s:%d:%s:%s", p.Name, p.Accepts, p.Default, opt))
			}
			if s := strings.Join(got, " "); s != c.want {
				t.Fatalf("fields %q, want %q", s, c.want)
			}
		})
	}
}

// TestCheckAgreesWithInputSchema: the check and the schema an MCP client is shown are one
// reading of the types, so they take and refuse the same payloads; they once were two parsers,
// and a backtick string was a string to the check and any value to the schema.
func TestCheckAgreesWithInputSchema(t *testing.T) {
	cases := []struct {
		kind     runtimes.Kind
		src      string
		payloads []string
	}{
		{runtimes.Bun, "export function main(mode: `fast` | `slow` = `fast`, n?: number) {}\n",
			[]string{`{"mode":"fast"}`, `{"mode":"slow","n":null}`, `{"mode":"medium"}`, `{"mode":1}`, `{"n":"1"}`}},
		{runtimes.Bun, "export function main(o: { a: string; b?: 1 | 2 }, xs: string[], r: Record<string, boolean>, any: {}) {}\n",
			[]string{`{"o":{"a":"x"}}`, `{"o":{"a":"x","b":3}}`, `{"o":{}}`, `{"xs":["a",1]}`, `{"r":{"k":true}}`, `{"r":{"k":1}}`, `{"any":"x"}`}},
		{runtimes.Python, "def main(top: int = 3, tags: list[str] | None = None, m: Optional[dict[str, float]] = None, v: Union[int, str] = 0): ...\n",
			[]string{`{"top":2}`, `{"top":2.5}`, `{"tags":null}`, `{"tags":["a",2]}`, `{"m":{"a":1}}`, `{"m":{"a":"1"}}`, `{"v":"x"}`, `{"v":[]}`}},
	}
	for _, c := range cases {
		in := InputSchema(c.kind, []byte(c.src))
		delete(in, "required") // a missing argument is the shim's business, not the type check's
		shown, err := resolve(in)
		if err != nil {
			t.Fatalf("%s: the input schema does not resolve: %v", c.src, err)
		}
		sig := Read(c.kind, []byte(c.src))
		for _, p := range c.payloads {
			var args map[string]any
			if err := json.Unmarshal([]byte(p), &args); err != nil {
				t.Fatal(err)
			}
			schemaErr, checkErr := shown.Validate(args), sig.Check([]byte(p))
			if (schemaErr == nil) != (checkErr == nil) {
				t.Errorf("%s %s: the input schema says %v, the check %v", c.src, p, schemaErr, checkErr)
			}
		}
	}
	// The default as written is the schema's too.
	got, _ := json.Marshal(InputSchema(runtimes.Bun, []byte("export function main(mode: `fast` | `slow` = `fast`, tag: string = 'x') {}\n"))["properties"])
	if want := `{"mode":{"default":"fast","enum":["fast","slow"],"type":"string"},"tag":{"default":"x","type":"string"}}`; string(got) != want {
		t.Errorf("properties %s, want %s", got, want)
	}
}

// A form shows a parameter's shape by an example of its type.
func TestExample(t *testing.T) {
	src := "type AI = Record<string, string>\nexport function main(ai: AI, n: number[], o: { a: string, b?: boolean }, u: 'up' | 'down', x: RT.Anthropic) {}\n"
	var got []string
	for _, p := range Fields(runtimes.Bun, []byte(src)) {
		got = append(got, p.Name+"="+p.Example())
	}
	want := `ai={"key":"text"} n=[1.5] o={"a":"text","b":true} u="up" x=`
	if s := strings.Join(got, " "); s != want {
		t.Fatalf("examples %s, want %s", s, want)
	}
}
