package functions

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agenthost/host/internal/annot"
)

func TestUnknownTools(t *testing.T) {
	fn := func(name string, tools ...string) *Function {
		return &Function{Name: name, Spec: &annot.Spec{Tools: tools}}
	}
	fns := map[string]*Function{"agent": fn("agent", "wordcount", "wordcont"), "wordcount": fn("wordcount"), "other": fn("other", "agent")}
	errs := UnknownTools(fns)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "agent: tools: names wordcont, which is not a function here") ||
		!strings.Contains(errs[0].Error(), "served: [other wordcount]") {
		t.Errorf("UnknownTools = %v, want the one misspelt name", errs)
	}
}

// A tools: cycle (a function naming itself, or a ↔ b, or longer) is refused at load, at its
// tools: line, naming the cycle; a function that only calls into a cycle is not on it and loads.
func TestToolCyclesAreRefusedAtLoad(t *testing.T) {
	dir := t.TempDir()
	for name, src := range map[string]string{
		"self.py":   "# tools: self\ndef main():\n    return 1\n",
		"a.py":      "# sandbox\n# tools: b\ndef main():\n    return 1\n",
		"b/main.ts": "// tools: a\nexport function main() { return 1 }\n",
		"x.py":      "# tools: y\ndef main():\n    return 1\n",
		"y.py":      "# tools: z\ndef main():\n    return 1\n",
		"z.py":      "# tools: x\ndef main():\n    return 1\n",
		"caller.py": "# tools: a self leaf\ndef main():\n    return 1\n",
		"leaf.py":   "def main():\n    return 1\n",
	} {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fns, errs := Load(dir)
	if got := slices.Sorted(maps.Keys(fns)); fmt.Sprint(got) != "[caller leaf]" {
		t.Errorf("loaded %v, want only [caller leaf]: every function on a cycle is refused", got)
	}
	var msgs []string
	for _, err := range errs {
		msgs = append(msgs, err.Error())
	}
	all := strings.Join(msgs, "\n")
	for _, want := range []string{
		filepath.Join(dir, "self.py") + ":1: tools: self calls back into itself (self → self)",
		filepath.Join(dir, "a.py") + ":2: tools: b calls back into itself (a → b → a)",
		filepath.Join(dir, "b", "main.ts") + ":1: tools: a calls back into itself (b → a → b)",
		filepath.Join(dir, "x.py") + ":1: tools: y calls back into itself (x → y → z → x)",
		filepath.Join(dir, "z.py") + ":1: tools: x calls back into itself (z → x → y → z)",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("errors lack %q:\n%s", want, all)
		}
	}
	if len(errs) != 6 {
		t.Errorf("%d errors, want one for each of the 6 functions on a cycle:\n%s", len(errs), all)
	}
}
