package host

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agenthost/host/internal/dashboard"
	"github.com/agenthost/host/internal/webauth"
)

// Handler serves the host's HTTP face: GET /healthz, GET /metrics, POST /hooks/{source},
// POST /run/{name} and the dashboard at every other path, all behind the web guard (token,
// CSRF check, security headers; see webauth), which leaves webhooks to their own authorization.
func (h *Host) Handler(gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case h.draining.Load():
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"status":"draining"}` + "\n"))
		case !h.Ready():
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"status":"starting or disconnected from NATS"}` + "\n"))
		default:
			w.Write([]byte(`{"status":"ok"}` + "\n"))
		}
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	if h.cfg.HookHandler != nil {
		mux.Handle("POST /hooks/{source}", h.cfg.HookHandler)
	}
	mux.Handle("POST /run/{name}", &runHTTP{h: h})
	mux.Handle("/", dashboard.New(dashboard.Config{NC: h.nc, FunctionsDir: h.cfg.FunctionsDir, Volumes: h.cfg.Volumes, Log: h.log}))
	return webauth.New(h.cfg.Web, h.log.Named("web")).Wrap(mux)
}
