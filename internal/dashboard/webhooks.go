package dashboard

import (
	"context"
	"net/http"

	"github.com/agenthost/host/internal/hooks"
)

// HookSources lists the webhook sources a host serves, with their keys' state and their last
// deliveries; *hooks.Handler is one.
type HookSources interface {
	Status(ctx context.Context) ([]hooks.SourceStatus, error)
}

// shownDeliveries is how many of a source's last deliveries the page lists.
const shownDeliveries = 5

type webhooksView struct {
	session      // who the page is shown to
	None    bool // the host takes no webhooks
	Err     string
	Base    string // scheme and host the page was reached at, for the sources' URLs
	Sources []hooks.SourceStatus
}

func (d *Dashboard) webhooksPage(w http.ResponseWriter, r *http.Request) {
	v := &webhooksView{None: d.cfg.Hooks == nil, Base: baseURL(r)}
	if d.cfg.Hooks != nil {
		ctx, cancel := requestContext(r)
		defer cancel()
		var err error
		if v.Sources, err = d.cfg.Hooks.Status(ctx); err != nil {
			v.Err = err.Error()
		}
		for i := range v.Sources {
			if ds := v.Sources[i].Deliveries; len(ds) > shownDeliveries {
				v.Sources[i].Deliveries = ds[:shownDeliveries]
			}
		}
	}
	d.render(w, r, "webhooks", v)
}

// baseURL is where the request reached this host: a proxy in front says so in
// X-Forwarded-Proto; the host itself serves plain HTTP.
func baseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https" {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}
