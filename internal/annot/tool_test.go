package annot

import (
	"strings"
	"testing"
)

func TestParseTool(t *testing.T) {
	runParseCases(t, []parseCase{
		{
			name: "tool with a description",
			src:  "# tool: Counts the words of a text\n",
			want: spec(func(s *Spec) { s.Tool = &Tool{Description: "Counts the words of a text", Line: 1} }),
		},
		{
			name: "bare tool",
			file: "fn.ts",
			src:  "// sandbox\n// tool\n",
			want: spec(func(s *Spec) { s.Sandbox = true; s.Tool = &Tool{Line: 2} }),
		},
		{
			name: "tools",
			src:  "# tools: wordcount hello\n",
			want: spec(func(s *Spec) { s.Tools, s.ToolsLine = []string{"wordcount", "hello"}, 1 }),
		},
		{
			name: "to-do prose is not a misspelt tools:",
			src:  "# todos: none\n# too: many\n",
			errs: []wantErr{{2, `did you mean "tool:"?`}},
		},
		{
			name: "tool twice",
			src:  "# tool: a\n# tool: b\n",
			errs: []wantErr{{2, "tool: is already set on line 1"}},
		},
		{
			name: "tool description too long",
			src:  "# tool: " + strings.Repeat("x", 1025) + "\n",
			errs: []wantErr{{1, "more than the 1024 a tool's may have"}},
		},
		{
			name: "tools without functions",
			src:  "# tools:\n",
			errs: []wantErr{{1, `tools: needs a value: write "tools: <function> ..."`}},
		},
		{
			name: "tools with a bad name",
			src:  "# tools: wordcount Hello.World\n",
			errs: []wantErr{{1, `"Hello.World" is not a function name`}},
		},
		{
			name: "tools naming one twice",
			src:  "# tools: a a\n",
			errs: []wantErr{{1, "names a twice"}},
		},
		{
			name: "Tools in capitals",
			src:  "# Tools: a\n",
			errs: []wantErr{{1, `write "tools:", not "Tools:"`}},
		},
		{
			name: "misspelt tool",
			src:  "# tooll: a\n",
			errs: []wantErr{{1, `did you mean "tool:"?`}},
		},
	})
}

func TestDoc(t *testing.T) {
	cases := []struct {
		name, file, src, want string
	}{
		{"comment block prose", "wordcount.ts", "// sandbox\n// timeout: 30s\n\n// Counts words in a text;\n// `top` is optional.\n\nexport function main() {}\n",
			"Counts words in a text; `top` is optional."},
		{"paragraphs", "w.sh", "# sandbox\n#\n# First.\n#\n# Second\n# line.\necho\n", "First.\n\nSecond line."},
		{"annotations are not prose, ill-formed ones neither", "a.py", "# tool: x\n# Sandbox\n# retries: 3\n# The doc.\n", "The doc."},
		{"python module docstring", "a.py", "# sandbox\n\n\"\"\"Says hello.\n\nTo anyone.\n\"\"\"\n\ndef main(): pass\n", "Says hello.\n\nTo anyone."},
		{"python main docstring", "a.py", "# sandbox\nimport os\n\ndef main(name: str = \"x\") -> dict:\n    '''Greets\n    name.'''\n    return {}\n", "Greets name."},
		{"jsdoc of main", "a.ts", "// sandbox\nimport x from 'y';\n/** Not this. */\nconst a = 1;\n/**\n * Adds two numbers.\n * Exactly.\n */\nexport async function main(a: number) {}\n", "Adds two numbers. Exactly."},
		{"nothing", "a.py", "# sandbox\nimport os\ndef main(): pass\n", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Doc(tc.file, []byte(tc.src)); got != tc.want {
				t.Errorf("Doc = %q, want %q", got, tc.want)
			}
		})
	}
	if got := Doc("a.py", []byte("# "+strings.Repeat("é", 2000)+"\n")); len(got) > maxDoc+len("…") || !strings.HasSuffix(got, "…") {
		t.Errorf("a long doc is not cut to %d bytes: %d bytes", maxDoc, len(got))
	}
}
