package dashboard

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
)

// jobList is one page of the jobs list.
type jobList struct {
	session   // who the page is shown to
	Filter    jobs.Filter
	Form      listForm // the filters as the form shows them
	Statuses  []jobtype.Status
	Rows      []jobRow
	Total     int // jobs the filters select, folded or not
	Page      int // from 0, the newest
	Pages     int
	Prev      string // the newer and older pages' URLs, "" at either end
	Next      string
	Query     string // this page's filter as a query string, for the live rows
	Now       time.Time
	Err       string
	BadFilter bool // Err is about the filters, not the records
}

// listForm is the filters as they were asked for, to fill the form and build links back.
type listForm struct {
	Function, ID, Flow, Status, From, To, Scheduled string
}

// The ways of showing scheduled runs (the scheduled parameter).
const (
	scheduledFold = "fold" // consecutive runs of one schedule are one row (the default)
	scheduledShow = "show" // every run a row
	scheduledHide = "hide" // none
)

// jobRow is one line of the list: all from the records' index, so a page costs no record
// bodies however long the history.
type jobRow struct {
	jobs.Summary
	Run time.Duration
	// Folded counts the scheduled runs of the same function right after this one (older) that
	// this row stands for, by status; More links to them.
	Folded map[jobtype.Status]int
	More   string
}

// FoldedRuns is how many runs the row stands for besides itself.
func (r jobRow) FoldedRuns() int {
	n := 0
	for _, c := range r.Folded {
		n += c
	}
	return n
}

// FoldedStatuses says how the folded runs ended, most common first: "55 succeeded, 2 failed".
func (r jobRow) FoldedStatuses() string {
	type count struct {
		s jobtype.Status
		n int
	}
	var cs []count
	for s, n := range r.Folded {
		cs = append(cs, count{s, n})
	}
	slices.SortFunc(cs, func(a, b count) int { return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.s, b.s)) })
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprintf("%d %s", c.n, c.s)
	}
	return strings.Join(parts, ", ")
}

var allStatuses = []jobtype.Status{jobtype.Queued, jobtype.Running, jobtype.Waiting, jobtype.Retrying, jobtype.Succeeded, jobtype.Failed, jobtype.Canceled, jobtype.Superseded}

func (d *Dashboard) jobsPage(w http.ResponseWriter, r *http.Request) {
	l := d.listJobs(r)
	if l.BadFilter {
		w.WriteHeader(http.StatusBadRequest)
	}
	d.render(w, r, "jobs", l)
}

// jobRows is the list alone, without the page around it, which the page polls for to stay
// live.
func (d *Dashboard) jobRows(w http.ResponseWriter, r *http.Request) {
	l := d.listJobs(r)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if l.BadFilter {
		w.WriteHeader(http.StatusBadRequest)
	}
	if err := d.pages["jobs"].ExecuteTemplate(w, "list", l); err != nil {
		d.log.Warn("dashboard: render job rows", zap.Error(err))
	}
}

// listTimeLayouts are the times a from or to filter takes: what a datetime-local input sends
// (the host's local time), with or without seconds, or RFC 3339.
var listTimeLayouts = []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339}

func parseListTime(name, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	for _, layout := range listTimeLayouts {
		if t, err := time.ParseInLocation(layout, v, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%s %q is not a time: write it as 2026-01-02T15:04 (the host's local time) or in RFC 3339 (2026-01-02T15:04:05Z)", name, v)
}

// readFilter reads the list's query parameters; a value that cannot be one is an error naming
// it and what it takes.
func readFilter(q url.Values) (jobs.Filter, listForm, int, error) {
	form := listForm{Function: strings.TrimSpace(q.Get("function")), ID: strings.TrimSpace(q.Get("id")), Flow: strings.TrimSpace(q.Get("flow")),
		Status: q.Get("status"), From: q.Get("from"), To: q.Get("to"), Scheduled: q.Get("scheduled")}
	f := jobs.Filter{FunctionLike: form.Function, IDLike: form.ID, Flow: form.Flow, Status: jobtype.Status(form.Status)}
	if f.Status != "" && !slices.Contains(allStatuses, f.Status) {
		return f, form, 0, fmt.Errorf("status %q is not a job's status: it is one of %v", form.Status, allStatuses)
	}
	switch form.Scheduled {
	case "":
		form.Scheduled = scheduledFold
	case scheduledFold, scheduledShow, scheduledHide:
	default:
		return f, form, 0, fmt.Errorf("scheduled %q: it is fold, show or hide", form.Scheduled)
	}
	var err error
	if f.From, err = parseListTime("from", form.From); err != nil {
		return f, form, 0, err
	}
	if f.To, err = parseListTime("to", form.To); err != nil {
		return f, form, 0, err
	}
	if !f.From.IsZero() && !f.To.IsZero() && !f.From.Before(f.To) {
		return f, form, 0, fmt.Errorf("from %s is not before to %s: nothing is between them", form.From, form.To)
	}
	page := 0
	if p := q.Get("page"); p != "" {
		if page, err = strconv.Atoi(p); err != nil || page < 0 {
			return f, form, 0, fmt.Errorf("page %q: it is a number from 0", p)
		}
	}
	return f, form, page, nil
}

func (d *Dashboard) listJobs(r *http.Request) *jobList {
	f, form, page, ferr := readFilter(r.URL.Query())
	l := &jobList{Filter: f, Form: form, Statuses: allStatuses, Page: page, Query: form.query(page).Encode(), Now: time.Now()}
	if ferr != nil {
		l.Err, l.BadFilter = ferr.Error(), true
		return l
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	c, err := d.client(ctx)
	if err != nil {
		l.Err = err.Error()
		return l
	}
	sums, err := c.Jobs.Summaries(ctx, f)
	if err != nil {
		l.Err = err.Error()
		return l
	}
	l.Total = len(sums)
	slices.SortFunc(sums, func(a, b jobs.Summary) int { return cmp.Or(b.When().Compare(a.When()), cmp.Compare(a.ID, b.ID)) })
	rows := foldScheduled(sums, form)
	l.Pages = (len(rows) + PageSize - 1) / PageSize
	from := min(page*PageSize, len(rows))
	to := min(from+PageSize, len(rows))
	for _, row := range rows[from:to] {
		row.Run = row.Summary.Run(l.Now)
		l.Rows = append(l.Rows, row)
	}
	if page > 0 {
		l.Prev = "/jobs?" + form.query(page-1).Encode()
	}
	if to < len(rows) {
		l.Next = "/jobs?" + form.query(page+1).Encode()
	}
	return l
}

// foldScheduled makes the rows of sums (newest first): with scheduled=fold, a run of its
// schedule right after (older than) another of the same function is counted in that one's row
// rather than shown, so a 15-second schedule is one row between the jobs around it.
func foldScheduled(sums []jobs.Summary, form listForm) []jobRow {
	rows := make([]jobRow, 0, len(sums))
	for _, s := range sums {
		if !s.Scheduled {
			rows = append(rows, jobRow{Summary: s})
			continue
		}
		switch form.Scheduled {
		case scheduledHide:
			continue
		case scheduledFold:
			if n := len(rows); n > 0 && rows[n-1].Scheduled && rows[n-1].Function == s.Function {
				head := &rows[n-1]
				if head.Folded == nil {
					head.Folded = map[jobtype.Status]int{}
					more := form
					more.Function, more.Scheduled = s.Function, scheduledShow
					head.More = "/jobs?" + more.query(0).Encode()
				}
				head.Folded[s.Status]++
				continue
			}
		}
		rows = append(rows, jobRow{Summary: s})
	}
	return rows
}

// query is the filters as a query string, for links that keep them.
func (form listForm) query(page int) url.Values {
	v := url.Values{}
	sched := form.Scheduled
	if sched == scheduledFold {
		sched = "" // the default
	}
	for k, s := range map[string]string{"function": form.Function, "id": form.ID, "flow": form.Flow, "status": form.Status,
		"from": form.From, "to": form.To, "scheduled": sched} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if page > 0 {
		v.Set("page", strconv.Itoa(page))
	}
	return v
}

// ago says how long before now t was, in the largest unit that fits: "3 min ago".
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "in " + roundAgo(-d)
	case d < 5*time.Second:
		return "just now"
	}
	return roundAgo(d) + " ago"
}

func roundAgo(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h", int(d/time.Hour))
	}
	return fmt.Sprintf("%d days", int(d/(24*time.Hour)))
}
