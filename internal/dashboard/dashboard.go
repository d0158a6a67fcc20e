// Package dashboard is the host's web face: server-rendered pages of jobs, a job's live log,
// functions, their wiring, flows, dead letters, schedules, volumes and secret names. It reads what the CLI reads, through package client, so
// a page and a `host` command can never disagree. It does no authentication: the host wraps
// the whole mux it is mounted on with its guard (package webauth). It checks what each route
// needs of the person the guard let through (webauth.Routes, on every request), and its pages
// name that person and leave out what their role may not do.
package dashboard

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/objstore"
	"github.com/agenthost/host/internal/people"
	"github.com/agenthost/host/internal/webauth"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

// Config is what the dashboard reads from.
type Config struct {
	// NC is a connection to the NATS the hosts serve on.
	NC *nats.Conn
	// FunctionsDir is the functions directory of the host serving the dashboard; the
	// functions page reads its annotations and refusals from it, as `host check` does.
	FunctionsDir string
	// FunctionsDirOf, when set, names the directory to read at each request instead: what the
	// host serves now (under serve --deployed the materialised deployment; host.Host.FunctionsDir).
	FunctionsDirOf func() string
	// Volumes is the volume store; nil when the host has none (the volume pages say so).
	Volumes *objstore.Volumes
	// Log records who did each mutating action.
	Log *zap.Logger
	// RunMaxBytes bounds the body of a run form, as it bounds POST /run's; DefaultRunMaxBytes
	// when zero.
	RunMaxBytes int64
	// Hooks lists the webhook sources this host serves, for the Webhooks page; nil when it
	// takes no webhooks.
	Hooks HookSources
	// Users lists the users for the Users page; nil when the host follows no user store.
	Users UserList
	// Drafts checks, test-runs and deploys the editor's drafts; nil when no host serves the
	// dashboard (the editor then checks and writes the directory, but runs nothing).
	Drafts Drafts
	// TraceURL links job and flow pages to their traces: a URL with {trace_id} (serve
	// --trace-url); no link when empty.
	TraceURL string
}

// Dashboard serves the pages. Mount it at "/".
type Dashboard struct {
	cfg   Config
	log   *zap.Logger
	mux   *http.ServeMux
	pages map[string]*template.Template

	c client.Lazy
}

// PageSize is how many jobs a page of the jobs list shows.
const PageSize = 100

// New builds the dashboard. It reads nothing yet: the job bucket may not exist until the host
// has started, so the client is opened on the first request that needs it.
func New(cfg Config) *Dashboard {
	d := &Dashboard{cfg: cfg, log: cfg.Log, mux: http.NewServeMux(), pages: map[string]*template.Template{}, c: client.Lazy{NC: cfg.NC}}
	if d.log == nil {
		d.log = zap.NewNop()
	}
	if d.cfg.RunMaxBytes <= 0 {
		d.cfg.RunMaxBytes = DefaultRunMaxBytes
	}
	base := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/staged.html"))
	for _, page := range []string{"jobs", "job", "functions", "flow", "dead", "schedules", "secrets", "volumes", "volume", "wiring", "function", "webhooks", "error", "inbox", "users", "audit", "deployments", "diff"} {
		t := template.Must(template.Must(base.Clone()).ParseFS(templateFS, "templates/"+page+".html"))
		d.pages[page] = t
	}
	assets, _ := fs.Sub(assetFS, "assets")
	d.handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(assets)))
	d.handleFunc("GET /{$}", d.jobsPage)
	d.handleFunc("GET /jobs", d.jobsPage)
	d.handleFunc("GET /jobs/rows", d.jobRows)
	d.handleFunc("GET /jobs/{id}", d.withClient(d.jobPage))
	d.handleFunc("GET /jobs/{id}/log", d.jobLog)
	d.handleFunc("POST /jobs/{id}/cancel", d.withClient(d.cancelJob))
	d.handleFunc("POST /jobs/{id}/decide", d.withClient(d.decideJob))
	d.handleFunc("GET /functions", d.functionsPage)
	d.handleFunc("GET /functions/{name}", d.functionPage)
	d.handleFunc("POST /functions/{name}/run", d.withClient(d.runFunction))
	d.handleFunc("POST /jobs/{id}/rerun", d.withClient(d.rerunJob))
	d.handleFunc("GET /jobs/{id}/outcome", d.withClient(d.jobOutcome))
	d.handleFunc("GET /assets/chroma.css", d.chromaCSS)
	d.handleFunc("GET /wiring", d.wiringPage)
	d.handleFunc("GET /wiring.json", d.wiringJSON)
	d.handleFunc("GET /flows/{id}", d.withClient(d.flowPage))
	d.handleFunc("POST /flows/{id}/cancel", d.withClient(d.cancelFlow))
	d.handleFunc("GET /dead", d.deadPage)
	d.handleFunc("POST /dead/{id}/replay", d.withClient(d.replayDead))
	d.handleFunc("POST /dead/{id}/remove", d.withClient(d.removeDead))
	d.handleFunc("GET /schedules", d.withClient(d.schedulesPage))
	d.handleFunc("POST /schedules/{function}/pause", d.withClient(d.pauseSchedule))
	d.handleFunc("POST /schedules/{function}/resume", d.withClient(d.resumeSchedule))
	d.handleFunc("GET /secrets", d.secretsPage)
	d.handleFunc("POST /secrets", d.setSecret)
	d.handleFunc("POST /secrets/remove", d.removeSecret)
	d.handleFunc("GET /webhooks", d.webhooksPage)
	d.handleFunc("GET /volumes", d.volumesPage)
	d.handleFunc("GET /volumes/{name}", d.withVolumes(d.volumePage))
	d.handleFunc("GET /volumes/{name}/file", d.withVolumes(d.volumeFile))
	d.handleFunc("POST /volumes/{name}/restore", d.withVolumes(d.restoreVolume))
	// The log viewer, the lists' filters, the approvals inbox (issue 25: items 3, 4, 7).
	d.handleFunc("GET /jobs/{id}/log.txt", d.withClient(d.jobLogText))
	d.handleFunc("GET /inbox", d.withClient(d.inboxPage))
	d.handleFunc("POST /inbox/{id}/decide", d.withClient(d.decideInbox))
	// People and who did what (issue 39).
	d.handleFunc("GET /users", d.usersPage)
	d.handleFunc("GET /audit", d.auditPage)
	// Deployments: history, diff, rollback (issue 40).
	d.handleFunc("GET /deployments", d.deploymentsPage)
	d.handleFunc("GET /deployments/diff", d.diffPage)
	d.handleFunc("POST /deployments/{n}/rollback", d.rollback)
	d.sourceRoutes()
	d.addEditor() // the editor on the function page (issue 42)
	return d
}

// handle serves pattern with h for the principals webauth.Routes lets do what it needs; the
// others are refused with a 403 saying what their role lacks (forbidden).
func (d *Dashboard) handle(pattern string, h http.Handler) {
	d.mux.Handle(pattern, webauth.Require(pattern, h, d.forbidden, d.log))
}

func (d *Dashboard) handleFunc(pattern string, h http.HandlerFunc) { d.handle(pattern, h) }

// client opens the client once the job bucket exists, and keeps it.
func (d *Dashboard) client(ctx context.Context) (*client.Client, error) {
	c, err := d.c.Get(ctx)
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	return c, nil
}

// withClient serves a request that reads or acts through the client, bounded by
// requestContext; a client that cannot be opened fails the request.
func (d *Dashboard) withClient(serve func(ctx context.Context, c *client.Client, w http.ResponseWriter, r *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := requestContext(r)
		defer cancel()
		c, err := d.client(ctx)
		if err != nil {
			d.fail(w, r, err)
			return
		}
		serve(ctx, c, w, r)
	}
}

// render writes page with data, or a 500 naming what failed.
func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, page string, data any) {
	if v, ok := data.(interface{ showTo(people.Principal) }); ok {
		v.showTo(webauth.Principal(r))
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := d.pages[page].ExecuteTemplate(w, "layout.html", data); err != nil {
		d.log.Error("dashboard: render page", zap.String("page", page), zap.Error(err))
	}
}

// fail answers a request that could not be served: 404 for an unknown job, 409 for a finished
// one, 500 otherwise, with the error's text (escaped: a page for a browser, plain text otherwise).
func (d *Dashboard) fail(w http.ResponseWriter, r *http.Request, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, client.ErrUnknownJob), errors.Is(err, client.ErrNoDeadLetter), errors.Is(err, errNoFunction):
		code = http.StatusNotFound
	case errors.Is(err, client.ErrFinished):
		code = http.StatusConflict
	}
	if code == http.StatusInternalServerError {
		d.log.Warn("dashboard: request failed", zap.String("path", r.URL.Path), zap.Error(err))
	}
	d.serveError(w, r, code, err.Error())
}

// requestContext bounds a page's reads: a page that cannot be read in this long will not be
// waited for by anyone.
func requestContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), 30*time.Second)
}

var funcs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Local().Format(time.DateTime)
	},
	"dur": func(d time.Duration) string {
		if d <= 0 {
			return "-"
		}
		return roundDuration(d).String()
	},
	"final":   func(s jobtype.Status) bool { return s.Final() },
	"inc":     func(n int) int { return n + 1 },
	"dec":     func(n int) int { return n - 1 },
	"percent": func(f *float64) string { return fmt.Sprintf("%.0f%%", *f*100) },
	// ago is a time as "3 min ago", its exact time on hover: rendered here, so it needs no
	// script.
	"ago": func(now, t time.Time) template.HTML {
		if t.IsZero() {
			return "-"
		}
		return template.HTML(`<time datetime="` + t.UTC().Format(time.RFC3339Nano) + `" title="` +
			template.HTMLEscapeString(t.Local().Format("2006-01-02 15:04:05.000 MST")) + `">` + template.HTMLEscapeString(ago(now, t)) + `</time>`)
	},
	"scheduledChoices": func() map[string]string {
		return map[string]string{scheduledFold: "folded", scheduledShow: "shown", scheduledHide: "hidden"}
	},
}

// roundDuration keeps three significant figures or so: microseconds matter for a fast job,
// not for a long one.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d > time.Minute:
		return d.Round(time.Second)
	case d > time.Second:
		return d.Round(time.Millisecond)
	case d > time.Millisecond:
		return d.Round(time.Microsecond)
	}
	return d
}

// who names who asked for an action, for its log line and the record: how the web guard let
// the request through and from where, or only the address when no guard ran (tests).
func who(r *http.Request) string {
	if w := webauth.Who(r); w != "" {
		return w
	}
	return "from " + r.RemoteAddr
}
