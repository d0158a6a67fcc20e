package webauth

import (
	"errors"
	"fmt"
	"net/http"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/people"
)

// Right is what a route of the web face needs of whoever asks.
type Right struct {
	// Act is the act the route is; 0 for the routes that carry their own authority (a
	// webhook's key, an approval link's signature) or are served by a mux that checks its own.
	Act people.Act
	// Fn names the path value holding the function a Run is of ("name"): a runner whose
	// --functions glob does not match it is refused here. A route of a job (cancel, re-run,
	// replay) finds the function in the job's record, and its handler checks it (MayRun).
	Fn string
}

var (
	read       = Right{Act: people.Read}
	runJob     = Right{Act: people.Run}
	decide     = Right{Act: people.Decide}
	develop    = Right{Act: people.Develop}
	administer = Right{Act: people.Administer}
	edit       = Right{Act: people.Edit}
	ownAuth    = Right{}
)

// Routes is every route of the web face (packages web and dashboard), by the pattern it is
// registered with, and what it needs. It is the one table of who may do what on the web:
// the muxes register each route through Require, which refuses a pattern missing here, so a
// new route cannot be served before someone decided who may use it. Pages read; what changes
// something needs the act it is, checked on the server whatever a page shows.
var Routes = map[string]Right{
	// package web
	"GET /healthz":           read,
	"GET /metrics":           read,
	"POST /run/{name}":       {Act: people.Run, Fn: "name"},
	"/run/{name}":            read, // any other method: the 405 saying it takes POST
	"/mcp":                   runJob,
	"POST /hooks/{source}":   ownAuth, // the source's HMAC or bearer key (package hooks)
	"/approvals/{job}":       ownAuth, // the hosts' signature on the link (package web)
	"/":                      ownAuth, // the dashboard, whose routes are below
	"GET /assets/":           read,
	"GET /assets/chroma.css": read,

	// package dashboard: pages
	"GET /{$}":                          read,
	"GET /jobs":                         read,
	"GET /jobs/rows":                    read,
	"GET /jobs/{id}":                    read,
	"GET /jobs/{id}/log":                read,
	"GET /jobs/{id}/log.txt":            read,
	"GET /jobs/{id}/outcome":            read,
	"GET /functions":                    read,
	"GET /functions/{name}":             read,
	"GET /wiring":                       read,
	"GET /wiring.json":                  read,
	"GET /flows/{id}":                   read,
	"GET /dead":                         read,
	"GET /schedules":                    read,
	"GET /webhooks":                     read,
	"GET /volumes":                      read,
	"GET /volumes/{name}":               read,
	"GET /volumes/{name}/file":          read,
	"GET /inbox":                        read,
	"GET /secrets":                      administer, // names only, but secrets are admins' business
	"GET /users":                        administer,
	"GET /audit":                        administer,
	"GET /deployments":                  read,
	"GET /deployments/diff":             read,
	"POST /deployments/{n}/rollback":    develop,
	"POST /functions/{name}/run":        {Act: people.Run, Fn: "name"},
	"POST /jobs/{id}/rerun":             runJob,
	"POST /jobs/{id}/cancel":            runJob,
	"POST /flows/{id}/cancel":           runJob,
	"POST /dead/{id}/replay":            runJob,
	"POST /dead/{id}/remove":            runJob,
	"POST /jobs/{id}/decide":            decide,
	"POST /inbox/{id}/decide":           decide,
	"POST /schedules/{function}/pause":  develop,
	"POST /schedules/{function}/resume": develop,
	"POST /secrets":                     administer,
	"POST /secrets/remove":              administer,
	"POST /volumes/{name}/restore":      administer,
	// Webhooks and schedules from the pages (issue 42): what `host hooks` and `host schedules` do.
	"POST /webhooks":                      develop,
	"POST /webhooks/{source}/remove":      develop,
	"GET /schedules/next":                 read,
	"POST /schedules":                     develop,
	"POST /schedules/named/{name}/remove": develop,
	"POST /schedules/named/{name}/pause":  develop,
	"POST /schedules/named/{name}/resume": develop,

	// package dashboard: the editor (issue 42)
	"GET /new-function":             edit,
	"POST /functions/{name}/check":  edit,
	"POST /functions/{name}/test":   edit,
	"POST /functions/{name}/deploy": edit,
}

// Refuser answers a request its principal may not make: 403, with err's text, which names what
// the principal's role lacks.
type Refuser func(w http.ResponseWriter, r *http.Request, err error)

// Forbidden is the plain Refuser: 403 and {"error": "..."}.
func Forbidden(w http.ResponseWriter, r *http.Request, err error) {
	writeError(w, http.StatusForbidden, err.Error())
}

// Require serves pattern with h once the request's principal may do what Routes says the
// pattern needs; refuse answers the others (Forbidden when nil). It panics for a pattern
// Routes lacks: a route must not be served before its right is decided.
func Require(pattern string, h http.Handler, refuse Refuser, log *zap.Logger) http.Handler {
	right, ok := Routes[pattern]
	if !ok {
		panic(fmt.Sprintf("webauth: route %q is not in webauth.Routes: say what it needs there before serving it", pattern))
	}
	if right.Act == 0 {
		return h
	}
	if refuse == nil {
		refuse = Forbidden
	}
	if log == nil {
		log = zap.NewNop()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fn := ""
		if right.Fn != "" {
			fn = r.PathValue(right.Fn)
		}
		if err := Principal(r).May(right.Act, fn); err != nil {
			log.Info("web request refused: the role does not allow it", zap.String("route", pattern), zap.String("path", r.URL.Path),
				zap.String("by", Who(r)), zap.Error(err))
			refuse(w, r, err)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Principal is who r is: PrincipalOf, or for a request no guard saw (a test, an embedder that
// guards otherwise) the operator, as the guard without a token treats loopback requests.
func Principal(r *http.Request) people.Principal {
	if p, ok := PrincipalOf(r); ok {
		return p
	}
	return operator("unguarded")
}

// MayRun checks that r's principal may run fn, for a route whose function is only known from a
// job's record; the error names what it lacks.
func MayRun(r *http.Request, fn string) error {
	return Principal(r).May(people.Run, fn)
}

// IsForbidden reports whether err is a refusal of a principal's act.
func IsForbidden(err error) bool { return errors.Is(err, people.ErrForbidden) }
