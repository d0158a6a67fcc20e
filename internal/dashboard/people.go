package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/audit"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/people"
	"github.com/agenthost/host/internal/webauth"
)

// UserList is where the Users page reads the users: the web guard's copy (webauth.Users) or
// the store itself (people.Store).
type UserList interface {
	Load(ctx context.Context) (people.Users, error)
}

// session is who a page is shown to. Every page's view embeds it: the layout names them, and a
// page leaves out what their role may not do. Hiding is for the eye only; every route checks
// the act again on the server (webauth.Routes).
type session struct {
	Me people.Principal
}

func (s *session) showTo(p people.Principal) { s.Me = p }

// templateActs are the acts a template may ask May about.
var templateActs = map[string]people.Act{"read": people.Read, "run": people.Run, "decide": people.Decide,
	"develop": people.Develop, "administer": people.Administer, "edit": people.Edit}

// May says whether the page's viewer may do act ("run", "decide", "develop", "administer").
func (s session) May(act string) bool {
	a, ok := templateActs[act]
	return ok && s.Me.May(a, "") == nil
}

// MayRun says whether the page's viewer may run fn.
func (s session) MayRun(fn string) bool { return s.Me.May(people.Run, fn) == nil }

// forbidden answers a request its principal's role does not allow: 403 with what it lacks, as
// the error page for a browser and as {"error": ...} for the pages' scripts and API callers.
func (d *Dashboard) forbidden(w http.ResponseWriter, r *http.Request, err error) {
	if wantsHTML(r) {
		d.serveError(w, r, http.StatusForbidden, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusForbidden)
	json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
}

// mayRunEach checks that r's principal may run every function fns lists, for acts on jobs
// whose functions only their records name (cancel, replay): fns is read only when the
// principal's role is narrowed to some functions (--functions). A refusal is answered, and
// false returned.
func (d *Dashboard) mayRunEach(w http.ResponseWriter, r *http.Request, fns func() ([]string, error)) bool {
	p := webauth.Principal(r)
	if p.Functions == "" || p.Functions == "*" {
		return true
	}
	names, err := fns()
	if err != nil {
		d.fail(w, r, err)
		return false
	}
	for _, fn := range names {
		if err := p.May(people.Run, fn); err != nil {
			d.log.Info("dashboard: refused, the function is not among the user's", zap.String("path", r.URL.Path), zap.String("by", who(r)), zap.Error(err))
			d.forbidden(w, r, err)
			return false
		}
	}
	return true
}

// jobFunction is the function of job id, for mayRunEach.
func jobFunction(ctx context.Context, c *client.Client, id string) ([]string, error) {
	rec, err := c.Jobs.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return []string{rec.Function}, nil
}

// flowFunctions are the functions of flow id's jobs, for mayRunEach: cancelling a flow ends
// each of them.
func flowFunctions(ctx context.Context, c *client.Client, id string) ([]string, error) {
	sums, err := c.Jobs.Summaries(ctx, jobs.Filter{Flow: id})
	if err != nil {
		return nil, err
	}
	var fns []string
	for _, s := range sums {
		fns = append(fns, s.Function)
	}
	slices.Sort(fns)
	return slices.Compact(fns), nil
}

// deadFunction is the function of job id's dead letter, for mayRunEach.
func deadFunction(ctx context.Context, c *client.Client, id string) ([]string, error) {
	dl, err := c.DeadLetter(ctx, id)
	if err != nil {
		return nil, err
	}
	return []string{dl.Function}, nil
}

// actor names who did an act for its record (a cancel's "by"): a user by name; the web token,
// which is nobody's, as the dashboard and the login that used it.
func actor(r *http.Request) string {
	if p := webauth.Principal(r); p.User {
		return p.Name
	}
	return "the dashboard (" + who(r) + ")"
}

// usersView is the Users page: who may log in and as what. Never a token or its hash.
type usersView struct {
	session
	Users []people.User
	None  bool // this host follows no user store
	Err   string
}

func (d *Dashboard) usersPage(w http.ResponseWriter, r *http.Request) {
	v := &usersView{None: d.cfg.Users == nil}
	if d.cfg.Users != nil {
		ctx, cancel := requestContext(r)
		defer cancel()
		us, err := d.cfg.Users.Load(ctx)
		if err != nil {
			v.Err = err.Error()
		}
		v.Users = us.Sorted()
	}
	d.render(w, r, "users", v)
}

// auditLimit is how many entries the Audit page shows at most: the newest.
const auditLimit = 500

// auditView is the Audit page: the acts recorded in AGENT_AUDIT, newest first.
type auditView struct {
	session
	Since, User string // the filter as given
	Entries     []audit.Entry
	Limit       int
	Err         string
}

func (d *Dashboard) auditPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	v := &auditView{Since: strings.TrimSpace(q.Get("since")), User: strings.TrimSpace(q.Get("user")), Limit: auditLimit}
	since, err := parseSince(v.Since, time.Now())
	if err != nil {
		v.Err = err.Error()
		d.render(w, r, "audit", v)
		return
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	js, err := jetstream.New(d.cfg.NC)
	if err == nil {
		v.Entries, err = audit.Read(ctx, js, audit.Filter{Since: since, Who: v.User, Limit: auditLimit})
	}
	if err != nil {
		v.Err = err.Error()
	}
	slices.Reverse(v.Entries)
	d.render(w, r, "audit", v)
}

// parseSince reads the Audit page's since: a duration back from now ("24h", "7d"), a date
// (2025-01-31) or a time (RFC 3339); "" is the beginning.
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 0 {
			return now.AddDate(0, 0, -n), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.ParseInLocation(time.DateOnly, s, time.Local); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("since %q: give a duration back from now (24h, 7d), a date (2025-01-31) or a time (2025-01-31T09:00:00Z)", s)
}

// audit appends an act done (or refused: err) through the dashboard to the audit stream, as
// the person logged in (actor) from the web face. A record that cannot be written is logged:
// the act stands.
func (d *Dashboard) audit(ctx context.Context, c *client.Client, r *http.Request, act, target, detail string, err error) {
	e := audit.Entry{Who: actor(r), Face: "web", Act: act, Target: target, Detail: detail}
	if err != nil {
		e.Error = err.Error()
	}
	if aerr := audit.Append(ctx, c.JS, e); aerr != nil {
		d.log.Warn("a dashboard act is done but not in the audit stream", zap.String("act", act), zap.String("target", target), zap.Error(aerr))
	}
}
