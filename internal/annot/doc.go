package annot

import (
	"regexp"
	"strings"
)

// maxDoc bounds Doc: a description a model reads on every turn, not a manual.
const maxDoc = 2048

var (
	pyModuleDoc = regexp.MustCompile(`^\s*[rRuU]?("""|''')((?s:.*?))("""|''')`)
	pyMainDoc   = regexp.MustCompile(`(?m)^(?:async[ \t]+)?def[ \t]+main[ \t]*\((?s:[^)]*)\)[^:\n]*:[ \t]*\n\s*[rRuU]?("""|''')((?s:.*?))("""|''')`)
	tsMainDoc   = regexp.MustCompile(`/\*\*((?:[^*]|\*+[^*/])*)\*+/\s*export[ \t]+(?:default[ \t]+)?(?:(?:async[ \t]+)?function[ \t]*\*?[ \t]*main\b|(?:const|let|var)[ \t]+main\b)`)
)

// Doc is what a script says of itself, for a tool's description when its "tool:" line gives
// none: the prose of its leading comment block (every line that is not an annotation), and
// without any, a Python module's docstring or main's, or the JSDoc comment of a TypeScript
// main. Lines of one paragraph are joined; paragraphs (split by an empty comment line) are
// kept apart. It is "" when the script says nothing.
func Doc(file string, src []byte) string {
	var paras []string
	var cur []string
	flush := func() {
		if len(cur) > 0 {
			paras = append(paras, strings.Join(cur, " "))
			cur = nil
		}
	}
	for _, body := range commentBlock(string(src), commentPrefix(file)) {
		switch {
		case body == "":
			flush()
		case isAnnotation(body):
		default:
			cur = append(cur, body)
		}
	}
	flush()
	doc := strings.Join(paras, "\n\n")
	if doc == "" {
		doc = codeDoc(file, string(src))
	}
	if len(doc) > maxDoc {
		cut := maxDoc
		for cut > 0 && doc[cut]&0xC0 == 0x80 {
			cut-- // not inside a character
		}
		doc = doc[:cut] + "…"
	}
	return doc
}

// isAnnotation reports whether a comment line of the block is an annotation (well formed or
// not), which is never part of the prose.
func isAnnotation(body string) bool {
	if m := keyShape.FindStringSubmatch(body); m != nil {
		return usage[strings.ToLower(m[1])] != ""
	}
	return wordShape.MatchString(body) && usage[strings.ToLower(body)] != ""
}

func codeDoc(file, src string) string {
	var text string
	if commentPrefix(file) == "//" {
		if m := tsMainDoc.FindStringSubmatch(src); m != nil {
			var lines []string
			for _, l := range strings.Split(m[1], "\n") {
				lines = append(lines, strings.TrimPrefix(strings.TrimSpace(l), "*"))
			}
			text = strings.Join(lines, "\n")
		}
	} else {
		// The module docstring is the first statement after the comment block.
		rest := src
		for _, l := range strings.SplitAfter(src, "\n") {
			if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
				break
			}
			rest = rest[len(l):]
		}
		if m := pyModuleDoc.FindStringSubmatch(rest); m != nil && m[1] == m[3] {
			text = m[2]
		} else if m := pyMainDoc.FindStringSubmatch(src); m != nil && m[1] == m[3] {
			text = m[2]
		}
	}
	// One paragraph per blank line, as in the comment block.
	var paras []string
	for _, p := range regexp.MustCompile(`\n\s*\n`).Split(strings.TrimSpace(text), -1) {
		if p = strings.Join(strings.Fields(p), " "); p != "" {
			paras = append(paras, p)
		}
	}
	return strings.Join(paras, "\n\n")
}
