package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

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

func newCmd() *cobra.Command {
	var lang, dir string
	cmd := &cobra.Command{
		Use:   "new <name>",
		Short: "Write a working function to start from, its annotations explained",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := writeNewFunction(dir, args[0], lang)
			if err != nil {
				return err
			}
			fmt.Printf("wrote %s; check it with `host check %s`, run it with `host invoke %s --wait` once a host serves %s\n", path, dir, args[0], dir)
			return nil
		},
	}
	cmd.Flags().StringVar(&lang, "lang", "py", "language: py, ts or sh")
	cmd.Flags().StringVar(&dir, "functions", "functions", "the functions directory to write into")
	return cmd
}

// writeNewFunction writes the template of lang as dir/name.<ext>, never over an existing
// function of that name, whatever its language.
func writeNewFunction(dir, name, lang string) (string, error) {
	t, ok := templates[lang]
	if !ok {
		return "", fmt.Errorf("--lang %q: want py, ts or sh", lang)
	}
	if err := functions.CheckName(name); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create functions directory: %w", err)
	}
	// Another file or folder of the same name would make the name ambiguous: the host refuses
	// the second definition.
	existing, _ := filepath.Glob(filepath.Join(dir, name) + ".*")
	if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
		existing = append(existing, filepath.Join(dir, name))
	}
	if len(existing) > 0 {
		return "", fmt.Errorf("function %s already exists (%s): not overwriting it; pick another name or remove it first", name, strings.Join(existing, ", "))
	}
	comment := "#"
	if lang == "ts" {
		comment = "//"
	}
	text := strings.NewReplacer("{{C}}", comment, "{{NAME}}", name).Replace(t.text)
	path := filepath.Join(dir, name+t.ext)
	mode := fs.FileMode(0o644)
	if lang == "sh" {
		mode = 0o755
	}
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
