// Package functions finds the functions in a directory, validates them, and keeps immutable
// snapshots of their code so that a running job never sees a half-edited file.
package functions

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/egressrule"
	"github.com/agenthost/host/internal/manifest"
	"github.com/agenthost/host/internal/route"
	"github.com/agenthost/host/internal/runtimes"
	"github.com/agenthost/host/internal/signature"
)

// namePattern keeps every function name a single safe NATS subject token.
var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// CheckName refuses a function name that could not be a NATS subject token.
func CheckName(name string) error {
	if !namePattern.MatchString(name) {
		return fmt.Errorf("function name %q must match %s (lower-case letters, digits, - and _, at most 63 characters), because it becomes a NATS subject token", name, namePattern)
	}
	return nil
}

// Function is one loaded, validated function.
type Function struct {
	Name string
	// Root is the file (single-file function) or the folder (folder function) on the host.
	Root string
	// Folder is true for a folder function (functions/<name>/main.<ext>).
	Folder bool
	// Entry is the entry file's path relative to Root's directory for a single file ("hello.py"),
	// or relative to the folder ("main.py").
	Entry   string
	Runtime runtimes.Kind
	Spec    *annot.Spec
	// Routes are its next: edges, their expressions compiled (see package route).
	Routes *route.Table
	// LimitKey and RateKey are the "per" expressions of limit: and rate:, compiled; nil when
	// the function has none (one key for all its messages).
	LimitKey, RateKey *route.Key
	// DebounceKey is the "by" expression of debounce:, compiled; nil when it has none.
	DebounceKey *route.Key
	// PriorityOf is the priority: expression, compiled; nil when it has none.
	PriorityOf *route.Key
	// Signature holds the types of main's parameters, read here once so that checking a
	// payload against them costs a run nothing; nil when there is nothing to check.
	Signature *signature.Signature
	// Hash is the content hash of everything the function consists of; a changed hash is a new
	// version.
	Hash string
}

// Subjects are the subjects that trigger the function: agent.run.<name>, its on: subjects,
// and for a join the error events of the steps it awaits (one failing for good fails the join).
func (f *Function) Subjects() []string {
	subjects := append([]string{bus.RunSubject(f.Name)}, f.Spec.On...)
	for _, fn := range f.Spec.Join {
		subjects = append(subjects, bus.ErrorSubject(fn))
	}
	return bus.MergeSubjects(subjects)
}

// Error is a function that was refused, with the file to blame.
type Error struct {
	Path string
	Err  error
}

// Error names the file once: most reasons already start with it ("f.py:2: unknown annotation"),
// and the caller says that the function was refused ("refused: ...", "function refused"), so
// neither is repeated here.
func (e *Error) Error() string {
	msg := e.Err.Error()
	if strings.Contains(msg, e.Path) {
		return msg
	}
	return e.Path + ": " + msg
}
func (e *Error) Unwrap() error { return e.Err }

// skipped are files in the functions directory that are not functions and not a mistake.
func skipped(name string) bool {
	if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "node_modules" || name == "__pycache__" {
		return true
	}
	ext := strings.ToLower(filepath.Ext(name))
	switch ext {
	case ".md", ".txt", ".json", ".lock", ".yaml", ".yml", ".toml":
		return true
	}
	return strings.HasPrefix(strings.ToUpper(name), "README") || strings.HasPrefix(strings.ToUpper(name), "LICENSE")
}

// Load reads every function in dir. Functions that fail to load are returned as *Error values
// and left out; the others are usable.
func Load(dir string) (map[string]*Function, []error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, []error{fmt.Errorf("read functions directory %s: %w", dir, err)}
	}
	fns := make(map[string]*Function)
	var errs []error
	for _, e := range entries {
		if skipped(e.Name()) {
			continue
		}
		f, err := LoadPath(filepath.Join(dir, e.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if prev, dup := fns[f.Name]; dup {
			errs = append(errs, &Error{Path: f.Root, Err: fmt.Errorf("function %q is already defined by %s", f.Name, prev.Root)})
			continue
		}
		fns[f.Name] = f
	}
	errs = append(errs, RefuseToolCycles(fns)...)
	return fns, errs
}

// LoadPath loads one function from a file or a folder.
func LoadPath(path string) (*Function, error) {
	fail := func(err error) (*Function, error) { return nil, &Error{Path: path, Err: err} }
	// The host reads and copies functions with its own rights (often root): a link leading
	// out of the functions directory would have it copy any file it can read (/etc/shadow)
	// to where the jail can read it.
	if err := staysInside(path, filepath.Dir(path)); err != nil {
		return fail(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return fail(err)
	}
	base := filepath.Base(path)
	f := &Function{Root: path}
	var entryPath string
	if st.IsDir() {
		f.Name, f.Folder = base, true
		entryPath, err = findMain(path)
		if err != nil {
			return fail(err)
		}
		if err := staysInside(entryPath, path); err != nil {
			return fail(err)
		}
		f.Entry = filepath.Base(entryPath)
	} else {
		f.Name = strings.TrimSuffix(base, filepath.Ext(base))
		entryPath, f.Entry = path, base
	}
	if err := CheckName(f.Name); err != nil {
		return fail(err)
	}
	if f.Runtime, err = runtimes.Detect(entryPath); err != nil {
		return fail(err)
	}
	src, err := os.ReadFile(entryPath)
	if err != nil {
		return fail(err)
	}
	if f.Spec, err = annot.Parse(entryPath, src); err != nil {
		return nil, &Error{Path: entryPath, Err: err}
	}
	if f.Routes, err = route.Compile(entryPath, f.Spec.Next); err != nil {
		return nil, &Error{Path: entryPath, Err: err}
	}
	if err := compileFlowKeys(entryPath, f); err != nil {
		return nil, &Error{Path: entryPath, Err: err}
	}
	if err := checkEgress(entryPath, f.Spec.Egress); err != nil {
		return nil, &Error{Path: entryPath, Err: err}
	}
	f.Signature = signature.Read(f.Runtime, src)
	if f.Folder {
		// Its package.json or requirements.txt is installed by the host, outside the jail: a
		// dependency on a host path is refused now, naming the file and line, not at its first run.
		if err := manifest.Check(path, f.Entry); err != nil {
			return fail(err)
		}
	}
	if f.Hash, err = hashTree(path); err != nil {
		return fail(err)
	}
	return f, nil
}

// staysInside refuses a path that is a symbolic link resolving outside dir. Links within dir
// (an alias of another function, a shared file) are fine.
func staysInside(path, dir string) error {
	st, err := os.Lstat(path)
	if err != nil || st.Mode()&fs.ModeSymlink == 0 {
		return nil // not a link; a missing path is reported by whoever reads it
	}
	target, err := filepath.EvalSymlinks(path)
	if err != nil {
		return fmt.Errorf("%s is a symbolic link that does not resolve (%v): replace it with the file itself", path, err)
	}
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("resolve %s: %w", dir, err)
	}
	if rel, err := filepath.Rel(root, target); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return fmt.Errorf("%s is a symbolic link to %s, outside %s: functions are read with the host's rights, so links may only point inside it; copy the file in instead", path, target, dir)
	}
	return nil
}

// findMain returns the folder's main.<ext>.
func findMain(dir string) (string, error) {
	matches, err := filepath.Glob(filepath.Join(dir, "main.*"))
	if err != nil {
		return "", err
	}
	matches = slices.DeleteFunc(matches, func(m string) bool {
		st, err := os.Stat(m)
		return err != nil || st.IsDir()
	})
	switch len(matches) {
	case 0:
		return "", errors.New("a function folder needs a main file (main.py, main.ts, main.js, main.mjs, main.sh or an executable main)")
	case 1:
		return matches[0], nil
	default:
		return "", fmt.Errorf("a function folder needs exactly one main file, found %d: %s", len(matches), strings.Join(matches, ", "))
	}
}

// hashTree hashes a file, or a folder's files with their relative paths and modes, in a stable
// order. node_modules and caches are left out: they are installed, not authored.
func hashTree(root string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (d.Name() == "node_modules" || d.Name() == "__pycache__" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%o\x00", rel, info.Mode().Perm()&0o111)
		fh, err := os.Open(p)
		if err != nil {
			return err
		}
		defer fh.Close()
		_, err = io.Copy(h, fh)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("hash %s: %w", root, err)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// checkEgress checks each egress: rule now, as the egress proxy will (egressrule.Check), so
// that a path glob it could not apply fails the load at its line rather than every job's first
// request.
func checkEgress(file string, rules []annot.EgressRule) error {
	var errs []error
	for _, r := range rules {
		if err := egressrule.Check(egressrule.Rule{Method: r.Method, Host: r.Host, Path: r.Path}); err != nil {
			errs = append(errs, &annot.Error{File: file, Line: r.Line, Msg: fmt.Sprintf(
				"egress: %s %s%s: %v; write \"egress: <METHOD|*> <host>[/<path glob>]\", e.g. \"egress: GET api.github.com/repos/acme/**\"",
				r.Method, r.Host, r.Path, err)})
		}
	}
	return errors.Join(errs...)
}

// compileFlowKeys compiles the "per" expressions of limit: and rate:, each a load error at its
// line when it does not compile.
func compileFlowKeys(file string, f *Function) error {
	var errs []error
	var err error
	if l := f.Spec.Limit; l != nil {
		if f.LimitKey, err = route.CompileKey(file, l.Line, fmt.Sprintf("limit: %d per", l.N), l.Per); err != nil {
			errs = append(errs, err)
		}
	}
	if r := f.Spec.Rate; r != nil {
		if f.RateKey, err = route.CompileKey(file, r.Line, fmt.Sprintf("rate: %d/%s per", r.N, r.Period), r.Per); err != nil {
			errs = append(errs, err)
		}
	}
	if d := f.Spec.Debounce; d != nil {
		if f.DebounceKey, err = route.CompileKey(file, d.Line, fmt.Sprintf("debounce: %s by", d.Wait), d.By); err != nil {
			errs = append(errs, err)
		}
	}
	if p := f.Spec.Priority; p != nil {
		if f.PriorityOf, err = route.CompileKey(file, p.Line, "priority:", p.Expr); err != nil {
			errs = append(errs, err)
		} else if _, err := Priority(f, []byte("{}")); err != nil && !strings.Contains(err.Error(), "must give it a value") {
			// A constant (or one that needs no argument) out of range is wrong at load.
			errs = append(errs, &annot.Error{File: file, Line: p.Line, Msg: err.Error()})
		}
	}
	return errors.Join(errs...)
}

// Priority is the priority of a message of f whose arguments are args: its priority:
// expression's value, a whole number from 1 to 10, or annot.DefaultPriority without one.
func Priority(f *Function, args []byte) (int, error) {
	if f.PriorityOf == nil {
		return annot.DefaultPriority, nil
	}
	v, err := f.PriorityOf.Eval(args)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < annot.MinPriority || n > annot.MaxPriority {
		return 0, fmt.Errorf("priority: %s gave %s; a priority is a whole number from %d to %d", f.Spec.Priority.Expr, v, annot.MinPriority, annot.MaxPriority)
	}
	return n, nil
}
