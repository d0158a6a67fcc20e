package voldiff_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/host/internal/voldiff"
)

// store is a version's content by hash, and an Opener over it that counts what was read.
type store struct {
	blobs  map[string][]byte
	opened []string
	read   int64
}

func (s *store) open(_ context.Context, f voldiff.File) (io.ReadCloser, error) {
	s.opened = append(s.opened, f.Path)
	b, ok := s.blobs[f.SHA256]
	if !ok {
		return nil, errors.New("no such blob")
	}
	return io.NopCloser(&counting{r: bytes.NewReader(b), n: &s.read}), nil
}

type counting struct {
	r io.Reader
	n *int64
}

func (c *counting) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	*c.n += int64(n)
	return n, err
}

func (s *store) file(path, content string) voldiff.File {
	sum := sha256.Sum256([]byte(content))
	h := hex.EncodeToString(sum[:])
	s.blobs[h] = []byte(content)
	return voldiff.File{Path: path, Type: voldiff.TypeFile, Mode: 0o644, Size: int64(len(content)), SHA256: h}
}

func newStore() *store { return &store{blobs: map[string][]byte{}} }

func compare(t *testing.T, s *store, old, cur []voldiff.File, o voldiff.Options) voldiff.Diff {
	t.Helper()
	d, err := voldiff.Compare(context.Background(), old, cur, s.open, o)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestTextChangeAddRemove(t *testing.T) {
	s := newStore()
	old := []voldiff.File{s.file("a.txt", "one\ntwo\nthree\n"), s.file("gone.txt", "bye\n"), s.file("same.txt", "same\n")}
	cur := []voldiff.File{s.file("a.txt", "one\nTWO\nthree\n"), s.file("new.txt", "hello\nworld\n"), s.file("same.txt", "same\n")}
	d := compare(t, s, old, cur, voldiff.Options{})
	if d.Added != 1 || d.Removed != 1 || d.Changed != 1 || len(d.Files) != 3 {
		t.Fatalf("counts: %+v", d)
	}
	want := map[string]string{
		"a.txt":    "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n",
		"gone.txt": "--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n",
		"new.txt":  "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,2 @@\n+hello\n+world\n",
	}
	for _, fd := range d.Files {
		if fd.Text != want[fd.Path] {
			t.Errorf("%s (%s): text\n%q\nwant\n%q", fd.Path, fd.Change, fd.Text, want[fd.Path])
		}
	}
	if slices.Contains(s.opened, "same.txt") {
		t.Errorf("an unchanged file was read: %v", s.opened)
	}
	var out bytes.Buffer
	if err := d.WriteText(&out, ""); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"changed  a.txt  (14 B → 14 B)", "added    new.txt  (12 B sha256:4a1e67f2fe1d, mode 0644)", "    -two", "    +TWO", "removed  gone.txt"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("text lacks %q:\n%s", line, out.String())
		}
	}
}

func TestHunksAndNoNewline(t *testing.T) {
	s := newStore()
	var a, b []string
	for i := range 30 {
		a = append(a, "line "+string(rune('a'+i%26)))
	}
	b = slices.Clone(a)
	b[2], b[28] = "changed early", "changed late"
	old := []voldiff.File{s.file("f", strings.Join(a, "\n"))}
	cur := []voldiff.File{s.file("f", strings.Join(b, "\n"))}
	d := compare(t, s, old, cur, voldiff.Options{})
	text := d.Files[0].Text
	if n := strings.Count(text, "@@ -"); n != 2 {
		t.Fatalf("want 2 hunks, got %d:\n%s", n, text)
	}
	for _, h := range []string{"@@ -1,6 +1,6 @@\n", "@@ -26,5 +26,5 @@\n"} {
		if !strings.Contains(text, h) {
			t.Errorf("no hunk header %q in\n%s", h, text)
		}
	}
	// The last line has no newline on either side and is context here.
	if !strings.HasSuffix(text, " line d\n\\ No newline at end of file\n") {
		t.Errorf("the last line:\n%s", text)
	}
}

func TestBinaryModeSymlinkType(t *testing.T) {
	s := newStore()
	bin := s.file("logo.png", "\x89PNG\x00\x01")
	bin2 := s.file("logo.png", "\x89PNG\x00\x02\x03")
	latin := s.file("latin1.txt", "caf\xe9\n")
	run := s.file("run.sh", "#!/bin/sh\n")
	run2 := run
	run2.Mode = 0o755
	link := voldiff.File{Path: "cur", Type: voldiff.TypeSymlink, Mode: 0o777, Target: "v1"}
	link2 := link
	link2.Target = "v2"
	was := s.file("was-file", "x\n")
	now := voldiff.File{Path: "was-file", Type: voldiff.TypeSymlink, Mode: 0o777, Target: "elsewhere"}
	old := []voldiff.File{link, bin, run, was}
	cur := []voldiff.File{link2, latin, bin2, run2, now}
	d := compare(t, s, old, cur, voldiff.Options{})
	got := map[string]voldiff.FileDiff{}
	for _, fd := range d.Files {
		got[fd.Path] = fd
	}
	if fd := got["logo.png"]; !fd.Binary || fd.Text != "" || !strings.Contains(fd.Summary(), "binary, 6 B sha256:"+bin.SHA256[:12]+" → 7 B sha256:"+bin2.SHA256[:12]) {
		t.Errorf("binary: %+v %q", fd, fd.Summary())
	}
	if fd := got["latin1.txt"]; !fd.Binary || fd.Change != voldiff.Added {
		t.Errorf("a file that is not UTF-8 is binary: %+v", fd)
	}
	if fd := got["run.sh"]; !slices.Equal(fd.What, []string{voldiff.WhatMode}) || fd.Text != "" || fd.Summary() != "mode 0644 → 0755" {
		t.Errorf("mode change: %+v %q", fd, fd.Summary())
	}
	if fd := got["cur"]; !slices.Equal(fd.What, []string{voldiff.WhatTarget}) || fd.Summary() != "target v1 → v2" {
		t.Errorf("symlink: %+v %q", fd, fd.Summary())
	}
	if fd := got["was-file"]; !slices.Equal(fd.What, []string{voldiff.WhatType}) || fd.Text != "" || !strings.HasSuffix(fd.Summary(), "→ symlink → elsewhere") {
		t.Errorf("type change: %+v %q", fd, fd.Summary())
	}
	if slices.Contains(s.opened, "run.sh") || slices.Contains(s.opened, "was-file") {
		t.Errorf("a mode or type change read content: %v", s.opened)
	}
}

// A 100 MB file is never opened: its sizes and hashes come from the lists alone.
func TestHugeFileIsNotRead(t *testing.T) {
	s := newStore()
	huge := voldiff.File{Path: "data.bin", Type: voldiff.TypeFile, Mode: 0o644, Size: 100 << 20, SHA256: strings.Repeat("ab", 32)}
	huge2 := huge
	huge2.SHA256 = strings.Repeat("cd", 32)
	big := bytes.Repeat([]byte("x"), 100<<20) // the content exists, and would be slow to diff
	s.blobs[huge.SHA256], s.blobs[huge2.SHA256] = big, big
	start := time.Now()
	d := compare(t, s, []voldiff.File{huge}, []voldiff.File{huge2}, voldiff.Options{})
	took := time.Since(start)
	if len(s.opened) != 0 || s.read != 0 {
		t.Fatalf("the 100 MiB file was opened (%v), %d bytes read", s.opened, s.read)
	}
	fd := d.Files[0]
	if fd.Text != "" || !strings.Contains(fd.Why, "over 1 MiB") || fd.Summary() != "100 MiB sha256:abababababab → 100 MiB sha256:cdcdcdcdcdcd" {
		t.Fatalf("huge: %+v %q", fd, fd.Summary())
	}
	t.Logf("compared a 100 MiB change in %v", took)
}

// The total bound cuts one file's text at a line end, says where, and later files are not read.
func TestCut(t *testing.T) {
	s := newStore()
	var old, cur []voldiff.File
	for _, name := range []string{"a", "b", "c"} {
		old = append(old, s.file(name, ""))
		cur = append(cur, s.file(name, strings.Repeat(name+" line\n", 100))) // 700 B each
	}
	d := compare(t, s, old, cur, voldiff.Options{MaxTextBytes: 1000})
	if d.CutAt != "b" || d.TextBytes > 1000 || !d.Files[1].Cut || d.Files[0].Cut {
		t.Fatalf("cut: at %q, %d bytes, %+v", d.CutAt, d.TextBytes, d.Files)
	}
	if !strings.HasSuffix(d.Files[1].Text, "+b line\n") || d.Files[2].Text != "" || !strings.Contains(d.Files[2].Why, "reached its bound of 1000 B at b") {
		t.Fatalf("after the cut: %q / %+v", d.Files[1].Text[len(d.Files[1].Text)-20:], d.Files[2])
	}
	if slices.Contains(s.opened, "c") {
		t.Errorf("a file after the cut was read: %v", s.opened)
	}
	var out bytes.Buffer
	_ = d.WriteText(&out, "")
	if !strings.Contains(out.String(), "the diff text stops at ") || !strings.Contains(out.String(), "in b: its bound is 1000 B") {
		t.Errorf("the text does not say where it was cut:\n%s", out.String())
	}
}

// Markup in a file and in its name is shown as text; lines are classed for colour; a long diff
// is folded.
func TestHTMLEscapesAndFolds(t *testing.T) {
	s := newStore()
	long := strings.Repeat("row\n", 50)
	cur := []voldiff.File{s.file("<b>x</b>.html", "<script>alert(1)</script>\n"), s.file("long.txt", long)}
	d := compare(t, s, nil, cur, voldiff.Options{})
	h, err := d.HTML()
	if err != nil {
		t.Fatal(err)
	}
	out := string(h)
	if strings.Contains(out, "<script>") || strings.Contains(out, "<b>x") {
		t.Fatalf("markup was not escaped:\n%s", out)
	}
	for _, want := range []string{`<span class="vd-add">&#43;&lt;script&gt;alert(1)&lt;/script&gt;</span>`, `data-path="&lt;b&gt;x&lt;/b&gt;.html" open>`, `data-path="long.txt">`} {
		if !strings.Contains(out, want) {
			t.Errorf("no %s in\n%s", want, out)
		}
	}
}

func TestContextEnds(t *testing.T) {
	_, err := voldiff.Compare(canceled(), nil, []voldiff.File{{Path: "a", Type: voldiff.TypeFile}}, nil, voldiff.Options{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// The diff text is a patch: GNU patch applied to the old content gives the new, for random
// edits of random files (with and without a last newline).
func TestPatchApplies(t *testing.T) {
	patch, err := exec.LookPath("patch")
	if err != nil {
		t.Skip("no patch(1) on this machine")
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	lines := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("l%d\n", rnd.IntN(8))
		}
		return out
	}
	for i := range 200 {
		a := lines(rnd.IntN(40))
		b := slices.Clone(a)
		for range rnd.IntN(6) {
			switch at := rnd.IntN(len(b) + 1); rnd.IntN(3) {
			case 0:
				b = slices.Insert(b, at, lines(1+rnd.IntN(3))...)
			case 1:
				if at < len(b) {
					b = slices.Delete(b, at, min(at+1+rnd.IntN(3), len(b)))
				}
			default:
				if at < len(b) {
					b[at] = "changed\n"
				}
			}
		}
		before, after := strings.Join(a, ""), strings.Join(b, "")
		if rnd.IntN(3) == 0 {
			before = strings.TrimSuffix(before, "\n")
		}
		if rnd.IntN(3) == 0 {
			after = strings.TrimSuffix(after, "\n")
		}
		s := newStore()
		d := compare(t, s, []voldiff.File{s.file("f", before)}, []voldiff.File{s.file("f", after)}, voldiff.Options{})
		if before == after {
			continue
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "f"), []byte(before), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(patch, "-s", "-p1", "-d", dir)
		cmd.Stdin = strings.NewReader(d.Files[0].Text)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("case %d: patch: %v %s\nbefore %q\nafter %q\ndiff:\n%s", i, err, out, before, after, d.Files[0].Text)
		}
		got, _ := os.ReadFile(filepath.Join(dir, "f"))
		if string(got) != after {
			t.Fatalf("case %d: patched %q, want %q\ndiff:\n%s", i, got, after, d.Files[0].Text)
		}
	}
}

// Paths beyond MaxFiles are counted, not listed, and not read.
func TestMaxFiles(t *testing.T) {
	s := newStore()
	var cur []voldiff.File
	for i := range 10 {
		cur = append(cur, s.file(fmt.Sprintf("f%02d", i), "x\n"))
	}
	d := compare(t, s, nil, cur, voldiff.Options{MaxFiles: 3})
	if d.Added != 10 || len(d.Files) != 3 || d.Unlisted != 7 || len(s.opened) != 3 {
		t.Fatalf("added %d, listed %d, unlisted %d, opened %v", d.Added, len(d.Files), d.Unlisted, s.opened)
	}
	var out bytes.Buffer
	_ = d.WriteText(&out, "")
	if !strings.Contains(out.String(), "7 more paths changed, not listed: the list stops at 3") {
		t.Errorf("text:\n%s", out.String())
	}
}

// A text file just under the size bound, changed on every tenth line: the diff is computed
// (go-udiff's search is bounded, the hunks are written in one pass) and its text is cut at the
// total bound.
func TestScatteredChangesInABigText(t *testing.T) {
	s := newStore()
	var a, b strings.Builder
	for i := 0; a.Len() < voldiff.DefaultMaxFileBytes-100; i++ {
		fmt.Fprintf(&a, "line %06d of the file\n", i)
		if i%10 == 0 {
			fmt.Fprintf(&b, "LINE %06d CHANGED\n", i)
		} else {
			fmt.Fprintf(&b, "line %06d of the file\n", i)
		}
	}
	start := time.Now()
	d := compare(t, s, []voldiff.File{s.file("big.txt", a.String())}, []voldiff.File{s.file("big.txt", b.String())}, voldiff.Options{})
	took := time.Since(start)
	fd := d.Files[0]
	if !fd.Cut || d.CutAt != "big.txt" || d.TextBytes > voldiff.DefaultMaxTextBytes || !strings.HasPrefix(fd.Text, "--- a/big.txt\n+++ b/big.txt\n@@ -1,4 +1,4 @@\n-line 000000 of the file\n+LINE 000000 CHANGED\n") {
		t.Fatalf("cut %v at %q, %d bytes; text starts %q", fd.Cut, d.CutAt, d.TextBytes, fd.Text[:min(len(fd.Text), 200)])
	}
	t.Logf("diffed %s with a change every 10 lines in %v (%s of diff text kept)", voldiff.Size(int64(a.Len())), took, voldiff.Size(int64(d.TextBytes)))

	// The worst shape for a line diff: 1 MiB of two-byte lines, every other one changed.
	a.Reset()
	b.Reset()
	for i := 0; a.Len() < voldiff.DefaultMaxFileBytes-2; i++ {
		a.WriteString("a\n")
		b.WriteString([]string{"b\n", "a\n"}[i%2])
	}
	start = time.Now()
	d = compare(t, s, []voldiff.File{s.file("ab.txt", a.String())}, []voldiff.File{s.file("ab.txt", b.String())}, voldiff.Options{})
	took = time.Since(start)
	if d.CutAt != "ab.txt" || d.TextBytes > voldiff.DefaultMaxTextBytes || !strings.HasPrefix(d.Files[0].Text, "--- a/ab.txt\n+++ b/ab.txt\n@@ ") {
		t.Fatalf("cut at %q, %d bytes", d.CutAt, d.TextBytes)
	}
	t.Logf("diffed %s of two-byte lines, every other one changed, in %v", voldiff.Size(int64(a.Len())), took)
}
