package web

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/dashboard"
	"github.com/agenthost/host/internal/people"
	"github.com/agenthost/host/internal/webauth"
)

// approvals serves the signed links an approval is announced with (host.ApprovalLink), without
// a login: whoever holds the link may make its one decision, once, until it expires. A GET only
// shows what the link decides, behind a button: a chat's link preview fetching it decides
// nothing. The POST of that button decides.
type approvals struct {
	cfg Config

	mu sync.Mutex
	c  *client.Client
}

// approvalPage is styled by the login page's sheet (webauth.StyleSheetPath), which the guard
// serves to anyone: whoever holds a link has no login.
var approvalPage = template.Must(template.New("approval").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title><link rel="stylesheet" href="` + webauth.StyleSheetPath + `"></head>
<body><header class="bar"><span class="brand">agent host</span></header>
<main class="card{{if .Staged}} wide{{end}}"><h1>{{.Title}}</h1><p id="link-text">{{.Text}}</p>
{{if .Staged}}<h2>What it commits</h2><p class="note">The step's volume changes are staged: approving commits them, rejecting throws them away.</p>{{.Staged}}{{end}}
{{if .Ask}}<form method="post"><label for="comment">Comment <span class="note">(optional)</span></label><input id="comment" name="comment" maxlength="2000">
<button type="submit">{{.Ask}}</button></form>{{end}}
</main></body></html>
`))

type approvalView struct {
	Title, Text, Ask string
	Staged           template.HTML // the diff of each volume the step staged, on the GET
}

func (a *approvals) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	for k, v := range webauth.Headers {
		w.Header().Set(k, v)
	}
	job, q := r.PathValue("job"), r.URL.Query()
	decision, exp, sig := q.Get("decision"), q.Get("expires"), q.Get("sig")
	show := func(code int, v approvalView) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(code)
		_ = approvalPage.Execute(w, v)
	}
	want := a.cfg.Sign("approval-link", job, decision, exp)
	if a.cfg.Sign == nil || sig == "" || subtle.ConstantTimeCompare([]byte(sig), []byte(want)) != 1 || (decision != "approve" && decision != "reject") {
		show(http.StatusForbidden, approvalView{Title: "Link refused", Text: "This link was not signed by this host. Ask for the link again, or decide with `host approve`."})
		return
	}
	unix, _ := strconv.ParseInt(exp, 10, 64)
	if expires := time.Unix(unix, 0); time.Now().After(expires) {
		show(http.StatusGone, approvalView{Title: "Link expired", Text: fmt.Sprintf("This link expired at %s: the approval of job %s timed out then.", expires.UTC().Format(time.RFC3339), job)})
		return
	}
	verb := map[string]string{"approve": "Approve", "reject": "Reject"}[decision]
	switch r.Method {
	case http.MethodGet:
		show(http.StatusOK, approvalView{Title: verb + " job " + job, Text: "This decides the approval of job " + job + ": " +
			map[string]string{"approve": "its next steps start with its result.", "reject": "it fails, and its flow stops there."}[decision], Ask: verb,
			Staged: a.staged(r.Context(), job)})
		return
	case http.MethodPost:
	default:
		w.Header().Set("Allow", "GET, POST")
		show(http.StatusMethodNotAllowed, approvalView{Title: "Method not allowed", Text: "Open the link, then press its button."})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	comment := r.PostFormValue("comment")
	c, err := a.client(r.Context())
	if err != nil {
		show(http.StatusServiceUnavailable, approvalView{Title: "Not now", Text: err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Minute)
	defer cancel()
	by := "a signed link (from " + r.RemoteAddr + ")"
	rec, err := c.Decide(ctx, job, decision == "approve", people.Principal{Name: by, Role: people.Approver, Via: "link"}, comment)
	switch {
	case errors.Is(err, client.ErrNotWaiting):
		show(http.StatusGone, approvalView{Title: "Already decided", Text: err.Error()})
	case err != nil:
		a.cfg.Log.Warn("approval link: the decision failed", zap.String("job_id", job), zap.Error(err))
		show(http.StatusBadGateway, approvalView{Title: "The decision failed", Text: err.Error()})
	default:
		a.cfg.Log.Info("approval decided by a signed link", zap.String("job_id", job), zap.String("decision", rec.Approval.Decision), zap.String("by", by))
		show(http.StatusOK, approvalView{Title: "Job " + job + " " + rec.Approval.Decision, Text: fmt.Sprintf("Its record says %s.", rec.Status)})
	}
}

// staged is the diff of each volume job staged, while it waits; "" when it staged none, or its
// record cannot be read (the page still decides: the host refuses what is not waiting).
func (a *approvals) staged(ctx context.Context, job string) template.HTML {
	c, err := a.client(ctx)
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	rec, err := c.Jobs.Get(ctx, job)
	if err != nil {
		a.cfg.Log.Info("approval link: cannot read the job to show its staged volumes", zap.String("job_id", job), zap.Error(err))
		return ""
	}
	h, err := dashboard.StagedHTML(dashboard.Staged(ctx, a.cfg.Volumes, rec))
	if err != nil {
		a.cfg.Log.Warn("approval link: cannot show the staged volumes", zap.String("job_id", job), zap.Error(err))
	}
	return h
}

func (a *approvals) client(ctx context.Context) (*client.Client, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.c != nil {
		return a.c, nil
	}
	c, err := client.New(ctx, a.cfg.NC)
	if err != nil {
		return nil, fmt.Errorf("the job store is not reachable yet: %w; try again in a moment", err)
	}
	a.c = c
	return c, nil
}
