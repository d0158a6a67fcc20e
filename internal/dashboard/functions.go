package dashboard

import (
	"cmp"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
)

// functionsView is the functions page: what the hosts announce and the records say
// (client.Functions, as `host functions`), with this host's annotations and refusals.
type functionsView struct {
	session   // who the page is shown to
	Functions []functionRow
	Refused   []string
	Err       string
}

type functionRow struct {
	*client.Function
	Spec    *annot.Spec // nil when this host's directory does not have it
	Volumes string
	Secrets string
	P50     time.Duration
}

func (d *Dashboard) functionsPage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := requestContext(r)
	defer cancel()
	v := &functionsView{}
	local, errs := d.localFunctions()
	for _, err := range errs {
		v.Refused = append(v.Refused, err.Error())
	}
	// One read of the records' index serves both the counts and the medians.
	c, err := d.client(ctx)
	var sums []jobs.Summary
	if err == nil {
		sums, err = c.Jobs.Summaries(ctx, jobs.Filter{})
	}
	var served []*client.Function
	if err == nil {
		served, err = c.FunctionsOf(ctx, sums)
	}
	if err != nil {
		v.Err = err.Error()
	}
	p50 := runTimeMedians(sums)
	var have storedSet
	if c != nil {
		have = storedSecrets(ctx, c)
	}
	seen := map[string]bool{}
	for _, f := range served {
		seen[f.Name] = true
		v.Functions = append(v.Functions, newFunctionRow(f, local[f.Name], p50[f.Name], have))
	}
	// A function of this directory no host announces (yet) is still worth a line.
	for name, lf := range local {
		if !seen[name] {
			v.Functions = append(v.Functions, newFunctionRow(&client.Function{Name: name, Runtime: string(lf.Runtime)}, lf, 0, have))
		}
	}
	slices.SortFunc(v.Functions, func(a, b functionRow) int { return cmp.Compare(a.Name, b.Name) })
	d.render(w, r, "functions", v)
}

// newFunctionRow is a function's line; have, when the store could be listed, marks the secrets
// it declares that are not stored.
func newFunctionRow(f *client.Function, lf *functions.Function, p50 time.Duration, have storedSet) functionRow {
	row := functionRow{Function: f, P50: p50}
	if lf == nil {
		return row
	}
	row.Spec = lf.Spec
	var vols []string
	for _, vol := range lf.Spec.Volumes {
		vols = append(vols, vol.Name)
	}
	row.Volumes = strings.Join(vols, ", ")
	row.Secrets = strings.Join(secretsNeeded(lf.Spec, have), ", ")
	return row
}

// secretsNeeded lists every secret a function declares, its sealed env: lines' too, each
// marked when have (nil: unknown) says it is not stored: a job of the function fails without it.
func secretsNeeded(s *annot.Spec, have storedSet) []string {
	var out []string
	for _, name := range declaredSecrets(s) {
		if have != nil && !have[name] {
			name += " (missing)"
		}
		out = append(out, name)
	}
	for _, ref := range s.SealedSecrets() {
		shown := ref + " (sealed)"
		if have != nil && !have.has(ref) {
			shown = ref + " (sealed, missing)"
		}
		out = append(out, shown)
	}
	return out
}

// declaredSecrets lists the secret names a function may receive: its secrets: and the
// secrets its env: entries name.
func declaredSecrets(s *annot.Spec) []string {
	out := slices.Clone(s.Secrets)
	for _, e := range s.Env {
		if e.Secret != "" && !slices.Contains(out, e.Secret) {
			out = append(out, e.Secret)
		}
	}
	slices.Sort(out)
	return out
}

// runTimeMedians is the median run time of each function's succeeded jobs.
func runTimeMedians(sums []jobs.Summary) map[string]time.Duration {
	runs := map[string][]time.Duration{}
	for _, s := range sums {
		if s.Status == jobtype.Succeeded && !s.Started.IsZero() && !s.Finished.IsZero() {
			runs[s.Function] = append(runs[s.Function], s.Run(s.Finished))
		}
	}
	out := map[string]time.Duration{}
	for fn, d := range runs {
		slices.Sort(d)
		out[fn] = d[len(d)/2]
	}
	return out
}
