package arch

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// A production file longer than this mixes lifecycles; split it by what it
// does (issue 38). Test files are left out: a table of cases may be long.
const maxFileLines = 600

// A production function longer than this does several things; name them as
// helpers (issue 38).
const maxFuncLines = 100

// sizeExceptions are files and functions allowed over a limit, each with a reason; a key is
// the file's path from the repo root, or that path, a colon and the function's name as
// funcName prints it. An entry no longer over its limit fails the test, so the list cannot
// go stale. It is empty: keep it so.
var sizeExceptions = map[string]bool{}

// TestSize fails naming every production .go file over maxFileLines lines
// and every function over maxFuncLines lines, outside testdata.
func TestSize(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	var over []string
	seen := map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		check := func(key, what string, n, max int) {
			if n <= max {
				return
			}
			if sizeExceptions[key] {
				seen[key] = true
				return
			}
			over = append(over, fmt.Sprintf("%s: %d lines (max %d)", what, n, max))
		}
		// As wc -l counts: a file's last line ends with a newline.
		check(rel, rel, bytes.Count(src, []byte("\n")), maxFileLines)
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			key := rel + ":" + funcName(fd)
			check(key, key, n, maxFuncLines)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(over)
	for _, o := range over {
		t.Errorf("too long, split it: %s", o)
	}
	// A stale exception would let the file or function grow back unnoticed.
	for key := range sizeExceptions {
		if !seen[key] {
			t.Errorf("sizeExceptions: %s is no longer over its limit (or gone): drop it from the list", key)
		}
		if !strings.HasPrefix(key, "internal/sandbox/") && !strings.HasPrefix(key, "internal/runner/") {
			t.Errorf("sizeExceptions: %s: only internal/sandbox and internal/runner may be excepted", key)
		}
	}
}

// funcName is fd's name, with its receiver's type for a method:
// "(*T).M", "T.M" or "F".
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	star := ""
	if s, ok := typ.(*ast.StarExpr); ok {
		star, typ = "*", s.X
	}
	switch x := typ.(type) {
	case *ast.IndexExpr:
		typ = x.X
	case *ast.IndexListExpr:
		typ = x.X
	}
	base := "?"
	if id, ok := typ.(*ast.Ident); ok {
		base = id.Name
	}
	if star != "" {
		return "(" + star + base + ")." + fd.Name.Name
	}
	return base + "." + fd.Name.Name
}
