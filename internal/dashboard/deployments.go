package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/deploy"
)

// The Deployments page, a diff between two deployments, and a rollback (issue 40): what
// `host deployments`, `host diff` and `host rollback` do, read from the same store.

// diffFoldLines is how long a file's diff may be before the diff page folds it: a long one
// would push the others off the page.
const diffFoldLines = 60

// deployStore opens the deployments' stores without making them: ErrNone on a host that never
// deployed.
func (d *Dashboard) deployStore(ctx context.Context) (*deploy.Store, error) {
	js, err := jetstream.New(d.cfg.NC)
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	return deploy.Attach(ctx, js)
}

// deploymentsView is the Deployments page, newest first.
type deploymentsView struct {
	session
	Deployments []*deploy.Deployment
	Current     int
	None        bool // nothing deployed yet
	Err         string
}

func (d *Dashboard) deploymentsPage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := requestContext(r)
	defer cancel()
	v := &deploymentsView{}
	st, err := d.deployStore(ctx)
	var list []*deploy.Deployment
	if err == nil {
		list, err = st.List(ctx)
	}
	if err == nil {
		var cur *deploy.Deployment
		if cur, err = st.Current(ctx); err == nil {
			v.Current = cur.Number
		}
	}
	switch {
	case errors.Is(err, deploy.ErrNone):
		v.None = true
	case err != nil:
		v.Err = err.Error()
	}
	for i := len(list) - 1; i >= 0; i-- {
		v.Deployments = append(v.Deployments, list[i])
	}
	d.render(w, r, "deployments", v)
}

// diffFile is one file's part of a diff: its header and lines, folded when long.
type diffFile struct {
	From, To string
	Lines    []diffLine
	Fold     bool
}

// diffLine is a line of a unified diff; Kind is "add", "del", "hunk" or "" (context).
type diffLine struct {
	Kind, Text string
}

// diffView is the diff page: deployment A's code to B's.
type diffView struct {
	session
	A, B  int
	Files []diffFile
	Err   string
}

// diffPage shows `host diff a b`: ?a=&b=, a defaulting to the deployment before b.
func (d *Dashboard) diffPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	b, errB := strconv.Atoi(q.Get("b"))
	if errB != nil || b <= 0 {
		d.serveError(w, r, http.StatusBadRequest, "say which deployment with ?b=<number> (and ?a=<number> to compare with another than the one before it)")
		return
	}
	a := b - 1
	if s := q.Get("a"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			d.serveError(w, r, http.StatusBadRequest, fmt.Sprintf("a=%q is not a deployment number", s))
			return
		}
		a = n
	}
	v := &diffView{A: a, B: b}
	ctx, cancel := requestContext(r)
	defer cancel()
	st, err := d.deployStore(ctx)
	text := ""
	if err == nil {
		text, err = st.Diff(ctx, a, b, "")
	}
	if err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, deploy.ErrNotKept) || errors.Is(err, deploy.ErrNone) {
			code = http.StatusNotFound
		}
		d.serveError(w, r, code, err.Error())
		return
	}
	v.Files = splitDiff(text)
	d.render(w, r, "diff", v)
}

// splitDiff cuts a unified diff into its files.
func splitDiff(text string) []diffFile {
	var files []diffFile
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(l, "--- ") && i+1 < len(lines) && strings.HasPrefix(lines[i+1], "+++ ") {
			files = append(files, diffFile{From: strings.TrimPrefix(l, "--- "), To: strings.TrimPrefix(lines[i+1], "+++ ")})
			i++
			continue
		}
		if len(files) == 0 || l == "" && i == len(lines)-1 {
			continue
		}
		f := &files[len(files)-1]
		kind := ""
		switch {
		case strings.HasPrefix(l, "@@"):
			kind = "hunk"
		case strings.HasPrefix(l, "+"):
			kind = "add"
		case strings.HasPrefix(l, "-"):
			kind = "del"
		}
		f.Lines = append(f.Lines, diffLine{Kind: kind, Text: l})
		f.Fold = len(f.Lines) > diffFoldLines
	}
	return files
}

// rollback stores a new deployment equal to {n}, as `host rollback <n>`, as the person logged
// in, and records it in the audit stream.
func (d *Dashboard) rollback(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n <= 0 {
		d.serveError(w, r, http.StatusBadRequest, fmt.Sprintf("%q is not a deployment number", r.PathValue("n")))
		return
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	st, err := d.deployStore(ctx)
	var dep *deploy.Deployment
	stored := false
	if err == nil {
		dep, stored, err = st.Rollback(ctx, n, actor(r))
	}
	target, detail := strconv.Itoa(n), ""
	if err == nil {
		target = strconv.Itoa(dep.Number)
		detail = strings.TrimSpace(dep.Message + " " + strings.Join(dep.Changed, " "))
		if !stored {
			detail = fmt.Sprintf("rollback to %d: unchanged, deployment %d already holds that code", n, dep.Number)
		}
	}
	if c, cerr := d.client(ctx); cerr == nil {
		d.audit(ctx, c, r, "rollback", target, detail, err)
	}
	if err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, deploy.ErrNotKept) || errors.Is(err, deploy.ErrNone) {
			code = http.StatusNotFound
		} else if errors.Is(err, deploy.ErrRace) {
			code = http.StatusConflict
		}
		d.serveError(w, r, code, fmt.Sprintf("roll back to deployment %d: %v", n, err))
		return
	}
	d.log.Info("dashboard: rolled back", zap.Int("to", n), zap.Int("deployment", dep.Number), zap.Bool("stored", stored), zap.String("by", who(r)))
	http.Redirect(w, r, "/deployments", http.StatusSeeOther)
}
