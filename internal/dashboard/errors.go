package dashboard

import (
	"net/http"
	"strings"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/webauth"
)

// errorView is an error page: what failed, inside the layout, so the way on is the nav.
type errorView struct {
	session // who the page is shown to
	Code    int
	Status  string
	Message string
}

// wantsHTML reports whether the client asked for a page: a browser's Accept names text/html.
// Others (curl, scripts, the tests' plain requests) get the error as plain text.
func wantsHTML(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}

// serveError answers with code and msg: a page in the layout for a browser, text otherwise.
func (d *Dashboard) serveError(w http.ResponseWriter, r *http.Request, code int, msg string) {
	if !wantsHTML(r) {
		http.Error(w, msg, code)
		return
	}
	h := w.Header()
	h.Del("Content-Length")
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	v := &errorView{Code: code, Status: http.StatusText(code), Message: msg}
	v.showTo(webauth.Principal(r))
	if err := d.pages["error"].ExecuteTemplate(w, "layout.html", v); err != nil {
		d.log.Warn("dashboard: render error page", zap.Int("code", code), zap.Error(err))
	}
}

// MethodNotAllowed answers a request for a path that exists with another method: 405, with
// Allow naming the ones it takes.
func (d *Dashboard) MethodNotAllowed(allow ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		d.serveError(w, r, http.StatusMethodNotAllowed, r.Method+" "+r.URL.Path+": this address takes "+strings.Join(allow, " or "))
	})
}

// unmatched catches what ServeMux writes for a request no pattern matches (its 404, or its 405
// with Allow), so the dashboard can say the same inside its layout.
type unmatched struct {
	header http.Header
	code   int
}

func (u *unmatched) Header() http.Header         { return u.header }
func (u *unmatched) Write(b []byte) (int, error) { return len(b), nil }
func (u *unmatched) WriteHeader(code int)        { u.code = code }

func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, pattern := d.mux.Handler(r); pattern != "" {
		d.mux.ServeHTTP(w, r)
		return
	}
	u := &unmatched{header: http.Header{}, code: http.StatusOK}
	d.mux.ServeHTTP(u, r)
	msg := "no page at " + r.URL.Path
	switch u.code {
	case http.StatusMethodNotAllowed:
		w.Header().Set("Allow", u.header.Get("Allow"))
		msg = r.Method + " " + r.URL.Path + ": this address takes " + u.header.Get("Allow")
	case http.StatusNotFound:
	default:
		msg = http.StatusText(u.code)
	}
	d.serveError(w, r, u.code, msg)
}
