package runtimes

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var pythonCases = []scriptCase{
	{
		name: "args by name",
		file: "greet.py",
		src: `def main(name: str, greeting: str = "Hello") -> str:
    return f"{greeting}, {name}!"
`,
		payload: `{"greeting": "Hi", "name": "Ada"}`,
		want:    `"Hi, Ada!"`,
	},
	{
		name: "defaults applied",
		file: "greet.py",
		src: `def main(name: str, greeting: str = "Hello", punctuation: str = "!") -> str:
    return f"{greeting}, {name}{punctuation}"
`,
		payload: `{"name": "Ada"}`,
		want:    `"Hello, Ada!"`,
	},
	{
		name: "missing required argument",
		file: "greet.py",
		src: `def main(name, greeting="Hello"):
    return f"{greeting}, {name}!"
`,
		payload:   `{"greeting": "Hi"}`,
		wantErr:   "argument",
		errHas:    `missing required argument "name" for main(name, greeting="Hello")`,
		stderrHas: []string{`missing required argument "name"`},
	},
	{
		name: "several missing required arguments",
		file: "transfer.py",
		src: `def main(source_account: str, target_account: str, amount: float, *, currency: str = "EUR", memo=None):
    return {"ok": True}
`,
		payload: `{"amount": 10}`,
		wantErr: "argument",
		errHas:  `missing required arguments "source_account", "target_account" for main(source_account, target_account, amount, *, currency="EUR", memo=null)`,
	},
	{
		name: "extra keys ignored",
		file: "resize.py",
		src: `def main(width: int, height: int, keep_ratio: bool = True):
    return {"pixels": width * height, "keep_ratio": keep_ratio}
`,
		payload: `{"width": 640, "height": 480, "format": "png", "source": {"bucket": "imgs"}}`,
		want:    `{"pixels": 307200, "keep_ratio": true}`,
	},
	{
		name: "kwargs receives every other key",
		file: "query.py",
		src: `def main(table: str, limit: int = 100, **filters):
    where = " AND ".join(f"{k} = {v!r}" for k, v in sorted(filters.items()))
    return {"sql": f"SELECT * FROM {table} WHERE {where} LIMIT {limit}", "filters": filters}
`,
		payload: `{"table": "users", "status": "active", "country": "FR"}`,
		want:    `{"sql": "SELECT * FROM users WHERE country = 'FR' AND status = 'active' LIMIT 100", "filters": {"status": "active", "country": "FR"}}`,
	},
	{
		name: "keyword-only and positional-only parameters",
		file: "deploy.py",
		src: `def main(service, /, version="latest", *, region="eu-west-1", dry_run=False):
    return {"service": service, "version": version, "region": region, "dry_run": dry_run}
`,
		payload: `{"service": "billing", "dry_run": true}`,
		want:    `{"service": "billing", "version": "latest", "region": "eu-west-1", "dry_run": true}`,
	},
	{
		name: "decorated main binds through its wrapped signature",
		file: "decorated.py",
		src: `import functools

def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        print(f"calling {fn.__name__}")
        return fn(*args, **kwargs)
    return wrapper

@logged
def main(city: str, units: str = "metric"):
    return {"city": city, "units": units}
`,
		payload:   `{"city": "Oslo", "ignored": 1}`,
		want:      `{"city": "Oslo", "units": "metric"}`,
		stdoutHas: []string{"calling main"},
	},
	{
		name: "a callable object as main",
		file: "callable.py",
		src: `class Handler:
    def __call__(self, n: int, step: int = 2):
        return list(range(0, n, step))

main = Handler()
`,
		payload: `{"n": 7}`,
		want:    `[0, 2, 4, 6]`,
	},
	{
		name: "async main",
		file: "fetch.py",
		src: `import asyncio

async def fetch_one(i: int) -> dict:
    await asyncio.sleep(0.01)
    return {"id": i, "status": "ok"}

async def main(ids: list[int]):
    results = await asyncio.gather(*(fetch_one(i) for i in ids))
    print(f"fetched {len(results)} items")
    return results
`,
		payload:   `{"ids": [3, 1, 2]}`,
		want:      `[{"id": 3, "status": "ok"}, {"id": 1, "status": "ok"}, {"id": 2, "status": "ok"}]`,
		stdoutHas: []string{"fetched 3 items"},
	},
	{
		name: "returning None gives null",
		file: "notify.py",
		src: `def main(channel: str, text: str):
    print(f"posting to #{channel}: {text}")
`,
		payload:    `{"channel": "ops", "text": "deploy done"}`,
		want:       `null`,
		lastLineIs: "posting to #ops: deploy done",
	},
	{
		name: "nested objects",
		file: "invoice.py",
		src: `from dataclasses import dataclass, asdict

@dataclass
class Line:
    sku: str
    qty: int
    unit_price: float

def main(order: dict, tax_rate: float = 0.2):
    lines = [Line(**item) for item in order["items"]]
    subtotal = sum(l.qty * l.unit_price for l in lines)
    return {
        "order_id": order["id"],
        "customer": order["customer"],
        "lines": [asdict(l) for l in lines],
        "totals": {"subtotal": subtotal, "tax": round(subtotal * tax_rate, 2)},
    }
`,
		payload: `{"order": {"id": 7, "customer": {"name": "Ada", "tags": ["vip"]}, "items": [{"sku": "A-1", "qty": 2, "unit_price": 5.0}, {"sku": "B-2", "qty": 1, "unit_price": 2.5}]}}`,
		want:    `{"order_id": 7, "customer": {"name": "Ada", "tags": ["vip"]}, "lines": [{"sku": "A-1", "qty": 2, "unit_price": 5.0}, {"sku": "B-2", "qty": 1, "unit_price": 2.5}], "totals": {"subtotal": 12.5, "tax": 2.5}}`,
	},
	{
		name: "unicode",
		file: "hello.py",
		src: `def main(name: str) -> dict:
    print(f"héllo {name}")
    return {"greeting": f"Grüß dich, {name} 👋", "length": len(name)}
`,
		payload:   `{"name": "Zoë 東京"}`,
		want:      `{"greeting": "Grüß dich, Zoë 東京 👋", "length": 6}`,
		stdoutHas: []string{"héllo Zoë 東京"},
	},
	{
		name: "set is not serialisable",
		file: "tags.py",
		src: `def main(posts: list):
    return {"tags": {tag for post in posts for tag in post["tags"]}}
`,
		payload: `{"posts": [{"tags": ["go", "python"]}, {"tags": ["go"]}]}`,
		wantErr: "result",
		errHas:  "not JSON-serialisable",
	},
	{
		name: "NaN is not JSON",
		file: "ratio.py",
		src: `def main(hits: float = 0.0, total: float = 0.0):
    return {"ratio": float("nan") if total == 0 else hits / total}
`,
		wantErr: "result",
		errHas:  "not JSON-serialisable",
	},
	{
		name: "exception in main",
		file: "charge.py",
		src: `def validate(amount):
    if amount <= 0:
        raise ValueError(f"amount must be positive, got {amount}")

def main(amount: float):
    print("validating")
    validate(amount)
    return {"charged": amount}
`,
		payload:   `{"amount": -5}`,
		wantErr:   "script",
		errHas:    "ValueError: amount must be positive, got -5",
		exitCode:  1,
		stdoutHas: []string{"validating"},
		stderrHas: []string{"Traceback", "charge.py", "in validate"},
	},
	{
		name: "exception while importing",
		file: "db.py",
		src: `import definitely_not_an_installed_module

def main():
    return 1
`,
		wantErr:  "script",
		errHas:   "ModuleNotFoundError: No module named 'definitely_not_an_installed_module'",
		exitCode: 1,
	},
	{
		name: "sys.exit with a code",
		file: "check.py",
		src: `import sys

def main(healthy: bool = False):
    if not healthy:
        print("unhealthy, giving up", file=sys.stderr)
        sys.exit(3)
    return "ok"
`,
		wantErr:   "script",
		errHas:    "SystemExit: 3",
		stderrHas: []string{"unhealthy"},
	},
	{
		name: "no main",
		file: "helpers.py",
		src: `def handler(event):
    return event
`,
		wantErr: "definition",
		errHas:  "does not define a main function",
	},
	{
		name:    "main is not callable",
		file:    "config.py",
		src:     "main = {\"debug\": True}\n",
		wantErr: "definition",
		errHas:  "main is not callable (it is a dict)",
	},
	{
		name: "syntax error",
		file: "broken.py",
		src: `def main(name)
    return name
`,
		wantErr:   "definition",
		errHas:    "SyntaxError",
		stderrHas: []string{"broken.py"},
	},
	{
		name: "__main__ block does not run",
		file: "report.py",
		src: `import sys

def main(day: str = "monday"):
    print(f"building report for {day}")
    return {"module": __name__, "day": day}

if __name__ == "__main__":
    print("LOCAL DEBUG RUN")
    print(main("sunday"))
`,
		want:      `{"module": "__script__", "day": "monday"}`,
		stdoutNot: []string{"LOCAL DEBUG RUN", "sunday"},
	},
	{
		name: "logs reach stdout in order",
		file: "etl.py",
		src: `import logging, sys

logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(levelname)s %(message)s")
log = logging.getLogger("etl")

def main(rows: int = 3):
    print("extract: start")
    for i in range(rows):
        log.info("transform row %d", i)
    print("load: done")
    return rows
`,
		want:       `3`,
		stdoutHas:  []string{"extract: start\nINFO transform row 0\nINFO transform row 1\nINFO transform row 2\nload: done\n"},
		lastLineIs: "load: done",
	},
	{
		name: "sibling module import",
		file: "job.py",
		src: `from pricing import apply_discount

def main(price: float, code: str = ""):
    return apply_discount(price, code)
`,
		files: map[string]string{
			"pricing.py": `def apply_discount(price, code):
    return round(price * 0.9, 2) if code == "SAVE10" else price
`,
		},
		payload: `{"price": 100, "code": "SAVE10"}`,
		want:    `90.0`,
	},
	{
		name: "sys.argv and cwd look normal",
		file: "where.py",
		src: `import os, sys

def main():
    return {"argv": [os.path.basename(a) for a in sys.argv], "cwd": os.path.basename(os.getcwd()),
            "shim_on_path": any(os.path.exists(os.path.join(p or ".", "shim.py")) for p in sys.path)}
`,
		want: `{"argv": ["where.py"], "cwd": "job", "shim_on_path": false}`,
	},
}

// pythonPaths returns PATH values under which "python3" resolves to each
// distinct interpreter worth testing: Debian's /usr/bin/python3 and whatever
// python3 comes first on the test's own PATH (pyenv here).
func pythonPaths(t *testing.T) map[string]string {
	t.Helper()
	path := os.Getenv("PATH")
	out := map[string]string{}
	seen := map[string]bool{}
	add := func(name, p string) {
		bin, err := lookPathIn("python3", p)
		if err != nil {
			return
		}
		real, err := filepath.EvalSymlinks(bin)
		if err != nil {
			real = bin
		}
		if !seen[real] {
			seen[real] = true
			out[name] = p
		}
	}
	add("PATH", path)
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		add("usr-bin", "/usr/bin:"+path)
	}
	if len(out) == 0 {
		t.Skip("no python3")
	}
	return out
}

func TestPython(t *testing.T) {
	for label, path := range pythonPaths(t) {
		t.Run(label, func(t *testing.T) {
			for _, c := range pythonCases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					r := runScript(t, c, path)
					if r.kind != Python {
						t.Fatalf("Detect = %q", r.kind)
					}
					check(t, c, r)
				})
			}
			t.Run("interpreter", func(t *testing.T) {
				c := scriptCase{file: "which.py", src: "import sys\n\ndef main():\n    return sys.executable\n"}
				r := runScript(t, c, path)
				if r.err != nil {
					t.Fatalf("%v\n%s", r.err, r.stderr)
				}
				t.Logf("python3 on this PATH is %s", r.result)
				if label == "usr-bin" && string(r.result) != `"/usr/bin/python3"` {
					t.Errorf("sys.executable = %s, want /usr/bin/python3", r.result)
				}
			})
		})
	}
}

// TestPythonStaleOutputs checks that a retry in the same IO dir cannot pick
// up the previous attempt's error.json.
func TestPythonStaleOutputs(t *testing.T) {
	c := scriptCase{file: "ok.py", src: "def main():\n    return 'fresh'\n", want: `"fresh"`}
	root := t.TempDir()
	script := filepath.Join(root, c.file)
	ioDir := filepath.Join(root, "io")
	must(t, os.Mkdir(ioDir, 0o755))
	must(t, os.WriteFile(script, []byte(c.src), 0o644))
	must(t, os.WriteFile(filepath.Join(ioDir, ErrorFile), []byte(`{"kind":"exception","message":"old"}`), 0o644))
	// No args.json at all: an absent payload is an empty one.
	cmd, err := Build(Python, Paths{Script: script, ShimDir: testShimDir, IODir: ioDir}, []byte("{}"), nil)
	must(t, err)
	code := runPlain(t, cmd, root)
	got, err := Outcome(Python, openIO(t, ioDir), 1<<20, nil, code)
	must(t, err)
	assertJSONEqual(t, got, c.want)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestPythonSignatureMessage(t *testing.T) {
	// The message names the parameter and shows the signature compactly.
	c := scriptCase{
		file:    "mail.py",
		src:     "def main(to: str, subject: str = 'Hi', *cc, retries: int = 3, **headers):\n    pass\n",
		wantErr: "argument",
		errHas:  `missing required argument "to" for main(to, subject="Hi", *cc, retries=3, **headers)`,
	}
	r := runScript(t, c, "")
	check(t, c, r)
	if strings.Count(r.err.Error(), "\n") != 0 {
		t.Errorf("message is not one line: %q", r.err)
	}
}
