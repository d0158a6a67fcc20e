// Package scaffold holds the working functions a new one starts from, one per language: what
// `host new` writes and what the dashboard's "New function" opens in its editor.
package scaffold

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agenthost/host/internal/functions"
)

// optionalAnnotations are shown, turned off, in every new function: removing the inner
// comment marker turns one on. Doubled markers are not annotations to the parser.
const optionalAnnotations = `{{C}}
{{C}} More annotations: remove one "{{C}} " to turn one on (the README lists them all).
{{C}} {{C}} volume: $name-data data           a persistent volume, mounted at ./data
{{C}} {{C}} schedule: */5 * * * *              also run every five minutes (5-field cron or @every 10m)
{{C}} {{C}} on: events.orders.>                also run on messages to this subject
{{C}} {{C}} network: proxy api.example.com     egress only through the host's proxy, to these hosts
{{C}} {{C}} secrets: api-key                   secrets a caller may pass as "$secret:api-key"
{{C}} {{C}} env: TOKEN=$secret:api-key         an environment variable, resolved from a secret
{{C}} {{C}} retries: 2                         attempts after the first, with backoff
{{C}}
{{C}} Run it:   host invoke {{NAME}} '{"name":"Ada"}' --wait
`

// templates are working functions, one per --lang: the file's extension and its text.
var templates = map[string]struct{ ext, text string }{
	"py": {".py", `# sandbox
# timeout: 30s
` + optionalAnnotations + `

def main(name: str = "world"):
    """The payload's keys are main's parameters; the return value, as JSON, is the result."""
    return {"greeting": f"Hello, {name}!"}
`},
	"ts": {".ts", `// sandbox
// timeout: 30s
` + optionalAnnotations + `
// The payload's keys are main's parameters; the return value, as JSON, is the result.
export async function main(name: string = "world") {
  return { greeting: ` + "`Hello, ${name}!`" + ` };
}
`},
	"sh": {".sh", `#!/usr/bin/env bash
# sandbox
# timeout: 30s
` + optionalAnnotations + `
# The payload arrives as JSON on stdin, each top-level scalar as ARG_<KEY>; the last line
# printed is the result (JSON when it parses as JSON).
set -euo pipefail
name="${ARG_NAME:-world}"
printf '{"greeting":"Hello, %s!"}\n' "$name"
`},
}

// Langs are the languages a new function may be written in, as --lang names them.
var Langs = []string{"py", "ts", "sh"}

// Template is the text of a new function name in lang, its file's extension and mode.
func Template(name, lang string) (text, ext string, mode fs.FileMode, err error) {
	t, ok := templates[lang]
	if !ok {
		return "", "", 0, fmt.Errorf("language %q: want py, ts or sh", lang)
	}
	if err := functions.CheckName(name); err != nil {
		return "", "", 0, err
	}
	comment := "#"
	if lang == "ts" {
		comment = "//"
	}
	mode = 0o644
	if lang == "sh" {
		mode = 0o755
	}
	return strings.NewReplacer("{{C}}", comment, "{{NAME}}", name).Replace(t.text), t.ext, mode, nil
}

// Existing lists the files or folder that already define a function name in dir: another of
// the same name would make the name ambiguous, and the host refuses the second definition.
func Existing(dir, name string) []string {
	existing, _ := filepath.Glob(filepath.Join(dir, name) + ".*")
	if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
		existing = append(existing, filepath.Join(dir, name))
	}
	return existing
}

// Write writes the template of lang as dir/name.<ext>, never over an existing
// function of that name, whatever its language.
func Write(dir, name, lang string) (string, error) {
	text, ext, mode, err := Template(name, lang)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create functions directory: %w", err)
	}
	if existing := Existing(dir, name); len(existing) > 0 {
		return "", fmt.Errorf("function %s already exists (%s): not overwriting it; pick another name or remove it first", name, strings.Join(existing, ", "))
	}
	path := filepath.Join(dir, name+ext)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("%s already exists: not overwriting it", path)
	}
	if err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		os.Remove(path)
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return path, nil
}
