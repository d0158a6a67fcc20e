package runtimes

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// shimJSONCheck compares the shim's json_loads and json_dumps, which go through json's C
// accelerators without importing json, with json.loads and json.dumps: same values, same
// text, and, for what json refuses, the same error type and message. It prints "ok". The shim
// must not import json, importlib.util or what they import (the interpreter's own start may).
const shimJSONCheck = `
import sys
before = set(sys.modules)  # what the interpreter's start imported (site, .pth files)
sys.path.insert(0, sys.argv[1])
import _agenthost_shim as shim
for name in ("json", "importlib.util", "re", "contextlib"):
    assert name in before or name not in sys.modules, "the shim imported " + name

texts = [b'{}', b'  {"a": 1, "b": [1, 2.5, -3e10, true, false, null], "c": {"d": "\\u00e9\\ud83d\\ude00"}}\n',
         '{"x": "\u00e9"}', b'[1,2,3]', b'"s"', b'12', b'NaN', b'[Infinity, -Infinity]', b'\t{"k":"v"}\r\n',
         '{"big": 123456789012345678901234567890, "f": 1.0000000000000002}'.encode(),
         b'{"a": 1}  ', b'{"dup": 1, "dup": 2}']
bad = [b'{', b'{"a": 1} x', b'[1,]', b'\xef\xbb\xbf{}', '\ufeff{}', b'\xff', b'{"a": "\\x"}', b'nul', b'{} {}',
       '{"a":1}'.encode('utf-16'), '{"a":1}'.encode('utf-32-le'), b'"\x01"']
# Input json takes goes through the C accelerators alone: json is not imported for it.
loaded = [shim.json_loads(t) for t in texts]
dumped = [shim.json_dumps(v) for v in ({"a": [1, 2.5, None, True]}, "é", 10**30)]
assert "json" in before or "json" not in sys.modules, "json_loads or json_dumps fell back to json for input json takes"
import json, math
for t, got in zip(texts, loaded):
    assert t == b'NaN' or got == json.loads(t), (t, got)
assert dumped == [json.dumps(v, ensure_ascii=False) for v in ({"a": [1, 2.5, None, True]}, "é", 10**30)], dumped
assert math.isnan(shim.json_loads(b'NaN'))
for t in bad:
    try:
        want = ("ok", json.loads(t))
    except Exception as e:
        want = (type(e), str(e))
    try:
        got = ("ok", shim.json_loads(t))
    except Exception as e:
        got = (type(e), str(e))
    assert got == want, (t, got, want)

class Odd: pass
cyclic = []; cyclic.append(cyclic)
values = [{}, {"a": 1, "b": [1, 2.5, -3e10, True, False, None]}, "é😀\u2028\x00\"\\", 1.0, 10**30, [], [[]],
          {1: "int key", 2.5: "float key", True: "bool key", None: "none key"}, (1, 2), float("nan"),
          float("inf"), Odd(), {"o": Odd()}, cyclic, {(1, 2): "tuple key"}, b"bytes", {"s": {1, 2}}]
for v in values:
    for kw in ({}, {"compact": True, "allow_nan": False}):
        seps = (",", ":") if kw.get("compact") else (", ", ": ")
        try:
            want = ("ok", json.dumps(v, ensure_ascii=False, allow_nan=kw.get("allow_nan", True), separators=seps))
        except Exception as e:
            want = (type(e), str(e))
        try:
            got = ("ok", shim.json_dumps(v, **kw))
        except Exception as e:
            got = (type(e), str(e))
        assert got == want, (v, kw, got, want)
print("ok")
`

func TestShimJSONIsJSONs(t *testing.T) {
	for name, path := range pythonPaths(t) {
		t.Run(name, func(t *testing.T) {
			py, err := lookPathIn("python3", path)
			if err != nil {
				t.Skip(err)
			}
			out, err := exec.Command(py, "-s", "-B", "-c", shimJSONCheck, filepath.Clean(testShimDir)).CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "ok" {
				t.Fatalf("%s: the shim's JSON differs from json's: %v\n%s", py, err, out)
			}
		})
	}
}
