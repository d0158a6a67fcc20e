package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/people"
	"github.com/agenthost/host/internal/scaffold"
	"github.com/agenthost/host/internal/webauth"
)

// The editor (issue 42): a function's page edits its entry file in CodeMirror (the bundle
// assets/editor.min.js, built from editor/ by scripts/build-editor), checks the draft as the
// author types with `host check`'s checks (POST /functions/{name}/check), test-runs it in a
// jail without deploying it (POST .../test, editor_run.go), and deploys it (POST .../deploy).
// A draft lives only in the page and in a temporary directory per request.

// MaxDraftBytes bounds a draft's source: a function is a script; data belongs in a volume.
const MaxDraftBytes = 256 << 10

// Drafts is what the editor asks of the host serving the dashboard. *host.Host is one.
type Drafts interface {
	// RunDraft runs fn, loaded from a directory of its own, once with payload in its jail,
	// sending each output line to log, and says how it ended; nothing of it is on NATS.
	RunDraft(ctx context.Context, fn *functions.Function, payload []byte, starter string, log jobtype.LineFunc) (*jobtype.Outcome, error)
	// ServesDeployments says whether the host serves deployments (serve --deployed): Deploy
	// stores one then, and otherwise writes the file into the served directory.
	ServesDeployments() bool
	// CheckFunction is what the host refuses beyond loading: `host check`'s checks.
	CheckFunction(ctx context.Context, f *functions.Function) error
}

// problem is one thing the check refuses in a draft: its file, line (0: the file as a whole)
// and message, and all three as one line (file:line: message).
type problem struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Message string `json:"message"`
	Text    string `json:"text"`
}

// editorView is the editor on a function's page.
type editorView struct {
	Lang     string // the entry's extension without its dot: py, ts, js, sh
	Source   string
	File     string // the entry as the draft's problems name it
	New      bool   // a function no host serves yet, from a template
	Deployed bool   // Deploy stores a deployment; false: it writes the served directory
	Dir      string // the served directory Deploy writes into, when not Deployed
	Running  bool   // a host is there to test-run drafts
}

// addEditor registers the editor's routes and pages.
func (d *Dashboard) addEditor() {
	t := template.Must(d.pages["function"].ParseFS(templateFS, "templates/editor.html"))
	d.pages["function"] = t
	d.pages["newfunction"] = template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/newfunction.html"))
	d.handleFunc("GET /new-function", d.newFunctionPage)
	d.handleFunc("POST /functions/{name}/check", d.checkDraft)
	d.handleFunc("POST /functions/{name}/test", d.testDraft)
	d.handleFunc("POST /functions/{name}/deploy", d.deployDraft)
}

// editorFor is the editor of fn's page for r's viewer; nil when they may not edit.
func (d *Dashboard) editorFor(r *http.Request, fn *functions.Function) *editorView {
	if fn == nil || webauth.Principal(r).May(people.Edit, "") != nil {
		return nil
	}
	src, err := readEntry(fn)
	if err != nil || len(src) > MaxDraftBytes {
		return nil // the page says why it shows no source; a cut draft must not be deployed
	}
	v := &editorView{Lang: strings.TrimPrefix(filepath.Ext(fn.Entry), "."), Source: string(src), File: draftFile(fn)}
	d.placeDeploy(v)
	return v
}

func (d *Dashboard) placeDeploy(v *editorView) {
	v.Running = d.cfg.Drafts != nil
	v.Deployed = d.cfg.Drafts != nil && d.cfg.Drafts.ServesDeployments()
	if !v.Deployed {
		v.Dir = d.servedDir()
	}
}

func (d *Dashboard) servedDir() string {
	if d.cfg.FunctionsDirOf != nil {
		return d.cfg.FunctionsDirOf()
	}
	return d.cfg.FunctionsDir
}

// draftFile is how a draft's problems name fn's entry: "greet.py", or "scrape/main.py".
func draftFile(fn *functions.Function) string {
	if fn.Folder {
		return fn.Name + "/" + fn.Entry
	}
	return fn.Entry
}

// newFunctionPage serves GET /new-function: without ?name= a form asking a name and a
// language, with them the function's page with the editor on the template `host new` writes.
func (d *Dashboard) newFunctionPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	name, lang := strings.TrimSpace(q.Get("name")), q.Get("lang")
	v := &newFunctionView{Name: name, Lang: lang, Langs: scaffold.Langs}
	if name == "" {
		d.render(w, r, "newfunction", v)
		return
	}
	text, ext, _, err := scaffold.Template(name, lang)
	if err == nil {
		if existing := scaffold.Existing(d.servedDir(), name); len(existing) > 0 {
			err = fmt.Errorf("function %s already exists: open its page, /functions/%s, to edit it", name, name)
		}
	}
	if err != nil {
		v.Err = err.Error()
		d.render(w, r, "newfunction", v)
		return
	}
	dr, err := loadDraft(r.Context(), name, nil, ext, text, nil)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	defer dr.remove()
	if dr.fn == nil {
		d.fail(w, r, fmt.Errorf("the template of %s does not load: %v", name, dr.problems))
		return
	}
	fv := &functionView{Name: name, Fn: dr.fn, Entry: dr.fn.Entry, Words: annotationWords(dr.fn.Spec), Subject: dr.fn.Subjects(),
		Fields: runFields(dr.fn), Secrets: declaredSecrets(dr.fn.Spec)}
	fv.Editor = &editorView{Lang: lang, Source: text, File: dr.file, New: true}
	d.placeDeploy(fv.Editor)
	d.render(w, r, "function", fv)
}

// newFunctionView is the form of GET /new-function.
type newFunctionView struct {
	session
	Name, Lang, Err string
	Langs           []string
}

// draft is a draft written into a directory of its own and loaded from it, as the host loads
// a function.
type draft struct {
	name, file string
	dir        string              // the temporary directory holding it
	fn         *functions.Function // nil when it does not load
	problems   []problem
}

func (dr *draft) remove() { os.RemoveAll(dr.dir) }

// loadDraft writes source as name's entry into a new temporary directory, beside a copy of
// base's folder when base is a folder function, and loads and checks it as `host check` does
// (checkFn: the host's check.Function; nil checks what loading checks, annotations and main's
// place, only). ext is the entry's extension when base is nil.
func loadDraft(ctx context.Context, name string, base *functions.Function, ext, source string, checkFn func(context.Context, *functions.Function) error) (*draft, error) {
	tmp, err := os.MkdirTemp("", "host-draft-")
	if err != nil {
		return nil, fmt.Errorf("write the draft of %s: %w", name, err)
	}
	dr := &draft{name: name, dir: tmp, file: name + ext}
	path, mode := filepath.Join(tmp, name+ext), fs.FileMode(0o644)
	if base != nil {
		dr.file = draftFile(base)
		path = filepath.Join(tmp, base.Entry)
		if st, err := os.Stat(base.Root); err == nil && !base.Folder {
			mode = st.Mode().Perm()
		}
		if base.Folder {
			path = filepath.Join(tmp, name, base.Entry)
			err = copyFolder(base.Root, filepath.Join(tmp, name))
		}
	}
	if err == nil && ext == ".sh" {
		mode = 0o755
	}
	if err == nil {
		err = os.WriteFile(path, []byte(source), mode)
	}
	if err != nil {
		dr.remove()
		return nil, fmt.Errorf("write the draft of %s: %w", name, err)
	}
	fns, errs := functions.Load(tmp)
	dr.fn = fns[name]
	if dr.fn != nil && checkFn != nil {
		if err := checkFn(ctx, dr.fn); err != nil {
			errs = append(errs, err)
			dr.fn = nil
		}
	} else if dr.fn == nil && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("%s does not load as function %s: name the entry %s", dr.file, name, name+ext))
	}
	for _, err := range errs {
		dr.problems = append(dr.problems, problemsOf(err, tmp, dr.file)...)
	}
	return dr, nil
}

// copyFolder copies a folder function's files (not what is installed: node_modules, caches,
// dot files) so that its draft runs and deploys with them.
func copyFolder(src, dst string) error {
	return filepath.WalkDir(src, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if p != src && (e.Name() == "node_modules" || e.Name() == "__pycache__" || strings.HasPrefix(e.Name(), ".")) {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		switch {
		case e.IsDir():
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		case e.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dst, rel), b, info.Mode().Perm())
		}
		return nil // links and the like stay with the deployed version
	})
}

// lineAt reads the line a checker's message names right after the file: "f.py:3:9: ..."
// (Python, Bun; the column is left out), "f.sh: line 3: ..." (bash -n).
var lineAt = regexp.MustCompile(`^(?::|: line )(\d+)(?::\d+)?:?\s*`)

// problemsOf splits a loader's or checker's error into problems, each named by file instead
// of the temporary directory: an annotation error per bad line.
func problemsOf(err error, tmp, file string) []problem {
	var ae *annot.Error
	if joined, ok := errors.Unwrap(err).(interface{ Unwrap() []error }); ok && errors.As(err, &ae) {
		var out []problem
		for _, e := range joined.Unwrap() {
			out = append(out, problemsOf(e, tmp, file)...)
		}
		return out
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []problem
		for _, e := range j.Unwrap() {
			out = append(out, problemsOf(e, tmp, file)...)
		}
		return out
	}
	text := err.Error()
	for _, p := range []string{tmp + "/" + file, tmp + "/"} {
		text = strings.ReplaceAll(text, p, file)
	}
	text = strings.ReplaceAll(text, tmp, ".")
	p := problem{File: file, Text: text}
	if errors.As(err, &ae) {
		p.Line, p.Message = ae.Line, ae.Msg
	} else {
		msg := strings.TrimPrefix(text, file)
		if m := lineAt.FindStringSubmatch(msg); m != nil {
			p.Line, _ = strconv.Atoi(m[1])
			msg = msg[len(m[0]):]
		} else if m := regexp.MustCompile(`\(` + regexp.QuoteMeta(file) + `:(\d+)`).FindStringSubmatch(msg); m != nil {
			p.Line, _ = strconv.Atoi(m[1]) // Bun's "SyntaxError: Unexpected ; (f.ts:2:13)"
		}
		p.Message = strings.TrimSpace(strings.TrimPrefix(msg, ":"))
	}
	if !strings.HasPrefix(p.Text, file) {
		p.Text = file + ": " + p.Text
	}
	return []problem{p}
}

// draftRequest is what the editor sends: the draft's source, and for a new function its
// language. It reads the body within MaxDraftBytes and the run form's bound together.
func (d *Dashboard) draftRequest(w http.ResponseWriter, r *http.Request) (name string, base *functions.Function, ext, source string, err error) {
	name = r.PathValue("name")
	if err := functions.CheckName(name); err != nil {
		return "", nil, "", "", &badRequest{http.StatusNotFound, err.Error()}
	}
	limit := MaxDraftBytes + d.cfg.RunMaxBytes
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	if err := r.ParseMultipartForm(limit); err != nil && !errors.Is(err, http.ErrNotMultipart) {
		if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
			return "", nil, "", "", &badRequest{http.StatusRequestEntityTooLarge, fmt.Sprintf("the request is over %d bytes: a draft may be %d bytes (%d KiB) and its arguments %d; keep data in a volume, not in the source", limit, MaxDraftBytes, MaxDraftBytes>>10, d.cfg.RunMaxBytes)}
		}
		return "", nil, "", "", &badRequest{http.StatusBadRequest, fmt.Sprintf("the draft cannot be read: %v", err)}
	}
	source = r.PostFormValue("source")
	if len(source) > MaxDraftBytes {
		return "", nil, "", "", &badRequest{http.StatusRequestEntityTooLarge, fmt.Sprintf("the draft is %d bytes, over the %d bytes (%d KiB) a draft may be: keep data in a volume or a file beside a folder function's main, not in the source", len(source), MaxDraftBytes, MaxDraftBytes>>10)}
	}
	local, _ := d.localFunctions()
	if base = local[name]; base != nil {
		return name, base, filepath.Ext(base.Entry), source, nil
	}
	lang := r.PostFormValue("lang")
	if !slices.Contains(scaffold.Langs, lang) {
		return "", nil, "", "", &badRequest{http.StatusBadRequest, fmt.Sprintf("function %s is new here: say its language with lang=py, ts or sh (got %q)", name, lang)}
	}
	return name, nil, "." + lang, source, nil
}

// loadRequest reads and loads the request's draft; a refusal is answered and nil returned.
func (d *Dashboard) loadRequest(w http.ResponseWriter, r *http.Request) *draft {
	name, base, ext, source, err := d.draftRequest(w, r)
	var dr *draft
	if err == nil {
		var checkFn func(context.Context, *functions.Function) error
		if d.cfg.Drafts != nil {
			checkFn = d.cfg.Drafts.CheckFunction
		}
		dr, err = loadDraft(r.Context(), name, base, ext, source, checkFn)
	}
	if err != nil {
		d.runRefused(w, r, r.PathValue("name"), err)
		return nil
	}
	return dr
}

// checkDraft serves POST /functions/{name}/check: the draft's problems as `host check` finds
// them, [] when it passes.
func (d *Dashboard) checkDraft(w http.ResponseWriter, r *http.Request) {
	dr := d.loadRequest(w, r)
	if dr == nil {
		return
	}
	defer dr.remove()
	writeJSON(w, http.StatusOK, map[string]any{"file": dr.file, "problems": orEmpty(dr.problems)})
}

// refuseProblems answers a test run or deploy of a draft that does not pass the check: 422
// with its problems, each file:line: message.
func (d *Dashboard) refuseProblems(w http.ResponseWriter, r *http.Request, act string, dr *draft) {
	var lines []string
	for _, p := range dr.problems {
		lines = append(lines, p.Text)
	}
	msg := fmt.Sprintf("%s refused: %s does not pass the check (`host check`): %s", act, dr.file, strings.Join(lines, "; "))
	d.log.Info("dashboard: draft refused", zap.String("function", dr.name), zap.String("act", act), zap.String("by", who(r)), zap.Strings("problems", lines))
	writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"error": msg, "problems": dr.problems})
}

func orEmpty(p []problem) []problem {
	if p == nil {
		return []problem{}
	}
	return p
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}
