package client

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/presence"
)

// Function is one served function as `host functions` shows it: what the hosts serving it
// announce, and what its job records say.
//
//	name          the function
//	runtime       python, bun, bash or exec
//	warm          the jails kept started for it, when its hosts announce them ("" when not)
//	hosts         the hosts serving it, sorted; a host leaves the list when it stops, or within
//	              the live hosts' TTL (30 s by default) when it dies
//	versions      the code versions they serve, sorted (more than one: the hosts disagree)
//	queued        its jobs waiting to run: queued, or retrying after a failed attempt
//	running       its jobs running now
//	last_run      when its latest job started
//	succeeded     its jobs that succeeded, of those whose records are kept
//	failed        its jobs that failed for good
//	success_rate  succeeded / (succeeded + failed); absent before any job finished that way
//	deployments   the deployments its hosts serve (serve --deployed)
//	refused       "<host>: <error>" for each host that refuses its file (host check's error)
type Function struct {
	Name        string    `json:"name"`
	Runtime     string    `json:"runtime"`
	Warm        string    `json:"warm,omitempty"`
	Hosts       []string  `json:"hosts"`
	Versions    []string  `json:"versions"`
	Queued      int       `json:"queued"`
	Running     int       `json:"running"`
	LastRun     time.Time `json:"last_run,omitzero"`
	Succeeded   int       `json:"succeeded"`
	Failed      int       `json:"failed"`
	SuccessRate *float64  `json:"success_rate,omitempty"`
	// Deployments are the deployments its hosts serve it from (serve --deployed), sorted;
	// more than one while hosts switch, or when one could not.
	Deployments []int `json:"deployments,omitempty"`
	// Refused are its hosts' refusals of its file, "<host>: <error naming file and line>":
	// a host that had a good version keeps serving it (it is in versions), one that had none
	// serves nothing of it.
	Refused []string `json:"refused,omitempty"`
	// SwitchErrors say why a host could not switch to the current deployment and still serves
	// an older one, "<host>: <error>".
	SwitchErrors []string `json:"switch_errors,omitempty"`
}

// Functions lists the functions some host serves, by name, with their queue depth and record.
func (c *Client) Functions(ctx context.Context) ([]*Function, error) {
	sums, err := c.Jobs.Summaries(ctx, jobs.Filter{})
	if err != nil {
		return nil, err
	}
	return c.FunctionsOf(ctx, sums)
}

// FunctionsOf is Functions with the counts taken from sums, the index of every job record
// (jobs.Store.Summaries), for a caller that reads the index for more than this.
func (c *Client) FunctionsOf(ctx context.Context, sums []jobs.Summary) ([]*Function, error) {
	board, err := presence.Bind(ctx, c.JS)
	if err != nil {
		return nil, err
	}
	entries, err := board.List(ctx, "")
	if err != nil {
		return nil, err
	}
	byName := map[string]*Function{}
	warm := map[string]map[string]int{} // by function, by host
	for _, e := range entries {
		a, name := e.Announcement, e.Function
		f := byName[name]
		if f == nil {
			f = &Function{Name: name}
			byName[name] = f
		}
		f.Runtime = cmp.Or(f.Runtime, a.Runtime)
		if a.Warm != nil {
			// Hosts may differ (--warm); each says what it keeps.
			if warm[name] == nil {
				warm[name] = map[string]int{}
			}
			warm[name][a.Host] = *a.Warm
		}
		f.Hosts = appendNew(f.Hosts, a.Host)
		f.Versions = appendNew(f.Versions, a.Version)
		if a.Deployment != 0 && !slices.Contains(f.Deployments, a.Deployment) {
			f.Deployments = append(f.Deployments, a.Deployment)
		}
		if a.Refused != "" {
			f.Refused = append(f.Refused, a.Host+": "+a.Refused)
		}
		if a.SwitchError != "" {
			f.SwitchErrors = appendNew(f.SwitchErrors, a.Host+": "+a.SwitchError)
		}
	}
	for _, s := range sums {
		f := byName[s.Function]
		if f == nil {
			continue // no host serves it now
		}
		switch s.Status {
		case jobtype.Queued, jobtype.Retrying:
			f.Queued++
		case jobtype.Running:
			f.Running++
		case jobtype.Succeeded:
			f.Succeeded++
		case jobtype.Failed:
			f.Failed++
		}
		if s.Started.After(f.LastRun) {
			f.LastRun = s.Started
		}
	}
	out := make([]*Function, 0, len(byName))
	for _, f := range byName {
		// In the bucket's order they would come as the hosts last wrote them, which differs
		// from one listing to the next.
		slices.Sort(f.Hosts)
		slices.Sort(f.Versions)
		slices.Sort(f.Deployments)
		slices.Sort(f.Refused)
		slices.Sort(f.SwitchErrors)
		for _, host := range f.Hosts {
			if n, ok := warm[f.Name][host]; ok {
				f.Warm = appendWarm(f.Warm, n)
			}
		}
		if n := f.Succeeded + f.Failed; n > 0 {
			rate := float64(f.Succeeded) / float64(n)
			f.SuccessRate = &rate
		}
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b *Function) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

func appendNew(s []string, v string) []string {
	if v == "" || slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

// appendWarm adds a host's warm-jail count to the ones already seen, as "1" or, when hosts
// differ, "1,2".
func appendWarm(have string, n int) string {
	v := strconv.Itoa(n)
	if have == "" {
		return v
	}
	if slices.Contains(strings.Split(have, ","), v) {
		return have
	}
	return have + "," + v
}
