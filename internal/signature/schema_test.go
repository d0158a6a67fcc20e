package signature

import (
	"encoding/json"
	"testing"

	"github.com/agenthost/host/internal/runtimes"
)

func TestInputSchema(t *testing.T) {
	cases := []struct {
		name string
		kind runtimes.Kind
		src  string
		want string
	}{
		{"python defaults and required", runtimes.Python, "def main(name: str, n: int = 3, ok: bool = True, greeting='hi'):\n  pass\n",
			`{"type":"object","properties":{"name":{"type":"string"},"n":{"type":"integer","default":3},"ok":{"type":"boolean","default":true},"greeting":{"default":"hi"}},"required":["name"]}`},
		{"python lists, dicts, unions", runtimes.Python, "def main(tags: list[str], m: dict[str, float], o: Optional[int], u: int | str | None = None, raw: list, x: MyClass):\n  pass\n",
			`{"type":"object","properties":{"tags":{"type":"array","items":{"type":"string"}},"m":{"type":"object","additionalProperties":{"type":"number"}},"o":{"type":["integer","null"]},"u":{"anyOf":[{"type":"integer"},{"type":"string"},{"type":"null"}],"default":null},"raw":{"type":"array"},"x":{"description":"of type MyClass, as the source writes it"}},"required":["tags","m","o","raw","x"]}`},
		{"typescript wordcount", runtimes.Bun, "export async function main(text: string, top: number = 3) {}\n",
			`{"type":"object","properties":{"text":{"type":"string"},"top":{"type":"number","default":3}},"required":["text"]}`},
		{"typescript nested", runtimes.Bun, "export function main(opts: { mode: \"fast\" | \"slow\"; depth?: number }, items: Array<{ id: string }>, tags?: string[], meta: Record<string, boolean>, any, o: object) {}\n",
			`{"type":"object","properties":{"opts":{"type":"object","properties":{"mode":{"type":"string","enum":["fast","slow"]},"depth":{"type":"number"}},"required":["mode"]},"items":{"type":"array","items":{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}},"tags":{"type":["array","null"],"items":{"type":"string"}},"meta":{"type":"object","additionalProperties":{"type":"boolean"}},"any":{},"o":{"type":["object","array"]}},"required":["opts","items","meta","any","o"]}`},
		{"bash has no signature", runtimes.Bash, "echo hi\n", `{"type":"object"}`},
		{"decorated main is not plain", runtimes.Python, "@wrap\ndef main(a: int):\n  pass\n", `{"type":"object"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := json.Marshal(InputSchema(tc.kind, []byte(tc.src)))
			if !jsonEqual(t, got, tc.want) {
				t.Errorf("InputSchema =\n %s\nwant\n %s", got, tc.want)
			}
		})
	}
}

func TestOutputSchema(t *testing.T) {
	cases := []struct {
		name string
		kind runtimes.Kind
		src  string
		want string // "null" for none
	}{
		{"python dict", runtimes.Python, "def main(a: int) -> dict:\n  return {}\n", `{"type":"object"}`},
		{"python dict of ints", runtimes.Python, "async def main() -> dict[str, int]:\n  return {}\n", `{"type":"object","additionalProperties":{"type":"integer"}}`},
		{"python int is no object", runtimes.Python, "def main() -> int:\n  return 1\n", `null`},
		{"python none declared", runtimes.Python, "def main():\n  return 1\n", `null`},
		{"typescript promise of a literal", runtimes.Bun, "export async function main(t: string): Promise<{ words: number; top: { word: string }[] }> {\n return {} as any }\n",
			`{"type":"object","properties":{"words":{"type":"number"},"top":{"type":"array","items":{"type":"object","properties":{"word":{"type":"string"}},"required":["word"]}}},"required":["words","top"]}`},
		{"typescript literal return", runtimes.Bun, "export function main(): { ok: boolean } {\n return { ok: true } }\n", `{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]}`},
		{"typescript arrow", runtimes.Bun, "export const main = async (a: number): Promise<Record<string, number>> => ({})\n", `{"type":"object","additionalProperties":{"type":"number"}}`},
		{"typescript string", runtimes.Bun, "export function main(): string { return '' }\n", `null`},
		{"typescript none", runtimes.Bun, "export function main(a: string) { return {} }\n", `null`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := json.Marshal(OutputSchema(tc.kind, []byte(tc.src)))
			if !jsonEqual(t, got, tc.want) {
				t.Errorf("OutputSchema =\n %s\nwant\n %s", got, tc.want)
			}
		})
	}
}

func jsonEqual(t *testing.T, got []byte, want string) bool {
	t.Helper()
	var a, b any
	if err := json.Unmarshal(got, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &b); err != nil {
		t.Fatalf("bad want %s: %v", want, err)
	}
	ga, _ := json.Marshal(a)
	gb, _ := json.Marshal(b)
	return string(ga) == string(gb)
}
