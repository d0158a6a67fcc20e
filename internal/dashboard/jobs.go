package dashboard

import (
	"cmp"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
)

// jobList is one page of the jobs list.
type jobList struct {
	Filter   jobs.Filter
	Statuses []jobtype.Status
	Rows     []jobRow
	Total    int
	Page     int // from 0, the newest
	Pages    int
	Prev     string // the newer and older pages' URLs, "" at either end
	Next     string
	Query    string // this page's filter as a query string, for the live rows
	Err      string
}

// jobRow is one line of the list: all from the records' index, so a page costs no record
// bodies however long the history.
type jobRow struct {
	jobs.Summary
	Run time.Duration
}

var allStatuses = []jobtype.Status{jobtype.Queued, jobtype.Running, jobtype.Retrying, jobtype.Succeeded, jobtype.Failed, jobtype.Canceled}

func (d *Dashboard) jobsPage(w http.ResponseWriter, r *http.Request) {
	d.render(w, "jobs", d.listJobs(r))
}

// jobRows is the list alone, without the page around it, which the page polls for to stay
// live.
func (d *Dashboard) jobRows(w http.ResponseWriter, r *http.Request) {
	l := d.listJobs(r)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := d.pages["jobs"].ExecuteTemplate(w, "list", l); err != nil {
		d.log.Warn("dashboard: render job rows", zap.Error(err))
	}
}

func (d *Dashboard) listJobs(r *http.Request) *jobList {
	q := r.URL.Query()
	f := jobs.Filter{Function: q.Get("function"), Flow: q.Get("flow"), Status: jobtype.Status(q.Get("status"))}
	page, _ := strconv.Atoi(q.Get("page"))
	page = max(page, 0)
	l := &jobList{Filter: f, Statuses: allStatuses, Page: page, Query: filterQuery(f, page).Encode()}
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
	l.Pages = (len(sums) + PageSize - 1) / PageSize
	slices.SortFunc(sums, func(a, b jobs.Summary) int { return cmp.Or(b.When().Compare(a.When()), cmp.Compare(a.ID, b.ID)) })
	from := min(page*PageSize, len(sums))
	to := min(from+PageSize, len(sums))
	now := time.Now()
	for _, s := range sums[from:to] {
		row := jobRow{Summary: s}
		if !s.Started.IsZero() {
			end := s.Finished
			if end.IsZero() {
				end = now
			}
			row.Run = end.Sub(s.Started)
		}
		l.Rows = append(l.Rows, row)
	}
	if page > 0 {
		l.Prev = "/jobs?" + filterQuery(f, page-1).Encode()
	}
	if to < len(sums) {
		l.Next = "/jobs?" + filterQuery(f, page+1).Encode()
	}
	return l
}

func filterQuery(f jobs.Filter, page int) url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"function": f.Function, "flow": f.Flow, "status": string(f.Status)} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if page > 0 {
		v.Set("page", strconv.Itoa(page))
	}
	return v
}
