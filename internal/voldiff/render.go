package voldiff

import (
	"bytes"
	"fmt"
	"html/template"
	"io"
	"strings"
)

// Summary is a FileDiff's one line: what changed, with sizes and short hashes where the content
// is not shown as text.
func (fd FileDiff) Summary() string {
	var s string
	switch fd.Change {
	case Added:
		s = describe(fd.New)
	case Removed:
		s = describe(fd.Old)
	default:
		var parts []string
		for _, w := range fd.What {
			switch w {
			case WhatType:
				parts = append(parts, fmt.Sprintf("%s → %s", describe(fd.Old), describe(fd.New)))
			case WhatTarget:
				parts = append(parts, fmt.Sprintf("target %s → %s", fd.Old.Target, fd.New.Target))
			case WhatMode:
				parts = append(parts, fmt.Sprintf("mode %04o → %04o", uint32(fd.Old.Mode.Perm()), uint32(fd.New.Mode.Perm())))
			case WhatContent:
				parts = append(parts, fmt.Sprintf("%s → %s", sized(fd.Old, fd.Text == ""), sized(fd.New, fd.Text == "")))
			}
		}
		s = strings.Join(parts, ", ")
	}
	if fd.Binary {
		s = "binary, " + s
	}
	return s
}

// describe says what one side is: a file's size (and hash), a symlink's target, a directory.
func describe(f *File) string {
	switch f.Type {
	case TypeSymlink:
		return "symlink → " + f.Target
	case TypeDir:
		return fmt.Sprintf("directory, mode %04o", uint32(f.Mode.Perm()))
	}
	return fmt.Sprintf("%s, mode %04o", sized(f, true), uint32(f.Mode.Perm()))
}

// sized is a file's size, and its short hash when withHash.
func sized(f *File, withHash bool) string {
	if !withHash || f.SHA256 == "" {
		return Size(f.Size)
	}
	return fmt.Sprintf("%s sha256:%s", Size(f.Size), short(f.SHA256))
}

func short(hash string) string { return hash[:min(len(hash), 12)] }

// WriteText writes d as a person reads it in a terminal: a line per path, then its diff text.
func (d Diff) WriteText(w io.Writer, indent string) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s%d added, %d removed, %d changed\n", indent, d.Added, d.Removed, d.Changed)
	for _, fd := range d.Files {
		fmt.Fprintf(&b, "%s%-8s %s  (%s)\n", indent, fd.Change, fd.Path, fd.Summary())
		if fd.Why != "" {
			fmt.Fprintf(&b, "%s         %s\n", indent, fd.Why)
		}
		for l := range strings.Lines(fd.Text) {
			b.WriteString(indent + "    " + l)
		}
	}
	if d.Unlisted > 0 {
		fmt.Fprintf(&b, "%s%d more paths changed, not listed: the list stops at %d\n", indent, d.Unlisted, len(d.Files))
	}
	if d.CutAt != "" {
		fmt.Fprintf(&b, "%sthe diff text stops at %s, in %s: its bound is %s\n", indent, Size(int64(d.TextBytes)), d.CutAt, Size(int64(d.MaxTextBytes)))
	}
	_, err := w.Write(b.Bytes())
	return err
}

// FoldLines is the number of diff lines above which HTML folds a file's diff.
const FoldLines = 40

// htmlLine is one line of diff text and the class that colours it.
type htmlLine struct{ Class, Text string }

// Lines splits fd's diff text into classed lines for HTML: vd-add, vd-del, vd-hunk, vd-head,
// vd-ctx.
func (fd FileDiff) lines() []htmlLine {
	var out []htmlLine
	for l := range strings.Lines(fd.Text) {
		l = strings.TrimSuffix(l, "\n")
		class := "vd-ctx"
		switch {
		case strings.HasPrefix(l, "+++ "), strings.HasPrefix(l, "--- "):
			class = "vd-head"
		case strings.HasPrefix(l, "@@"):
			class = "vd-hunk"
		case strings.HasPrefix(l, "+"):
			class = "vd-add"
		case strings.HasPrefix(l, "-"):
			class = "vd-del"
		}
		out = append(out, htmlLine{class, l})
	}
	return out
}

// htmlFile is what the HTML template shows of a FileDiff.
type htmlFile struct {
	FileDiff
	Summary string
	Lines   []htmlLine
	Open    bool // short diffs are shown unfolded
}

var htmlDiff = template.Must(template.New("diff").Parse(`<div class="vd">
<p class="vd-counts">{{.D.Added}} added, {{.D.Removed}} removed, {{.D.Changed}} changed</p>
{{range .Files}}{{if or .Lines .Why}}<details class="vd-file vd-{{.Change}}" data-path="{{.Path}}"{{if .Open}} open{{end}}>
<summary>{{template "row" .}}</summary>
{{if .Why}}<p class="vd-why">{{.Why}}</p>{{end}}
{{if .Lines}}<pre class="vd-text">{{range .Lines}}<span class="{{.Class}}">{{.Text}}</span>
{{end}}</pre>{{end}}
</details>{{else}}<div class="vd-file vd-{{.Change}} vd-row" data-path="{{.Path}}">{{template "row" .}}</div>{{end}}
{{end}}{{if .D.Unlisted}}<p class="vd-cut">{{.D.Unlisted}} more paths changed, not listed: the list stops at {{len .D.Files}}.</p>{{end}}{{if .D.CutAt}}<p class="vd-cut">The diff text stops at {{.Size .D.TextBytes}}, in <code>{{.D.CutAt}}</code>: its bound is {{.Size .D.MaxTextBytes}}.</p>{{end}}
</div>
{{define "row"}}<span class="vd-change">{{.Change}}</span> <code class="vd-path">{{.Path}}</code> <span class="vd-summary">{{.Summary}}</span>{{if .Lines}} <span class="vd-nlines">{{len .Lines}} lines</span>{{end}}{{end}}`))

type htmlView struct {
	D     Diff
	Files []htmlFile
}

func (htmlView) Size(n int) string { return Size(int64(n)) }

// HTML renders d for a page: a <details> per path, folded when its diff is longer than
// FoldLines, lines classed vd-add, vd-del, vd-hunk, vd-head and vd-ctx for a style sheet to
// colour (the pages' CSP allows no inline style). Every name and line is escaped by
// html/template: a file holding markup shows it as text.
func (d Diff) HTML() (template.HTML, error) {
	v := htmlView{D: d}
	for _, fd := range d.Files {
		ls := fd.lines()
		v.Files = append(v.Files, htmlFile{FileDiff: fd, Summary: fd.Summary(), Lines: ls, Open: len(ls) <= FoldLines})
	}
	var b bytes.Buffer
	if err := htmlDiff.Execute(&b, v); err != nil {
		return "", fmt.Errorf("render the diff as HTML: %w", err)
	}
	return template.HTML(b.String()), nil //nolint:gosec // html/template escaped every value above
}
