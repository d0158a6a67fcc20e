package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/hooks"
	"github.com/agenthost/host/internal/secrets"
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
	Done    string
	Form    *hookForm // the form as refused, or the source being edited
}

func (d *Dashboard) webhooksPage(w http.ResponseWriter, r *http.Request) {
	f := &hookForm{Auth: string(hooks.HMAC)}
	if name := r.URL.Query().Get("edit"); name != "" {
		f = &hookForm{Name: name, Edit: true}
	}
	d.renderWebhooks(w, r, f, http.StatusOK)
}

func (d *Dashboard) renderWebhooks(w http.ResponseWriter, r *http.Request, f *hookForm, status int) {
	v := &webhooksView{None: d.cfg.Hooks == nil, Base: baseURL(r), Done: r.URL.Query().Get("done"), Form: f}
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
	if f.Edit && f.Auth == "" {
		for _, s := range v.Sources {
			if s.Name == f.Name {
				f.Auth = string(s.Auth)
			}
		}
	}
	if status != http.StatusOK {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(status)
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

// hookForm is the Webhooks page's form as given, kept when refused; never the key.
type hookForm struct {
	Name, Auth, Err string
	Edit            bool
}

// saveWebhook adds (or, with edit, changes) a webhook source as `host secrets set --hook` and
// `host hooks add` do: the key, when given, is sealed by a host under <source>-key (or the
// source's key name when it has one), then the source is stored; the key is never shown again.
func (d *Dashboard) saveWebhook(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxSecretForm)
	if err := r.ParseForm(); err != nil {
		d.serveError(w, r, http.StatusBadRequest, "the form cannot be read: "+err.Error())
		return
	}
	f := hookForm{Name: strings.TrimSpace(r.PostForm.Get("name")), Auth: r.PostForm.Get("auth"), Edit: r.PostForm.Get("edit") != ""}
	keyText := r.PostForm.Get("key")
	ctx, cancel := requestContext(r)
	defer cancel()
	refuse := func(code int, err error) {
		d.log.Info("dashboard: webhook source refused", zap.String("source", f.Name), zap.Error(err), zap.String("by", who(r)))
		f.Err = err.Error()
		d.renderWebhooks(w, r, &f, code)
	}
	c, err := d.client(ctx)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	reg, err := hooks.BindRegistry(ctx, c.JS)
	if err != nil {
		refuse(http.StatusServiceUnavailable, err)
		return
	}
	keyName := ""
	if auth := hooks.Auth(f.Auth); auth == hooks.HMAC || auth == hooks.Bearer {
		keyName = f.Name + "-key"
		if old, ok := findEntry(ctx, reg, f.Name); ok && old.Key != "" {
			keyName = old.Key // an edit keeps the key's name, and its value unless a new one is given
		}
	}
	src, err := hooks.NewSource(f.Name, hooks.Auth(f.Auth), keyName)
	if err == nil {
		err = d.checkHookForm(ctx, reg, f, keyText, src)
	}
	if err != nil {
		refuse(http.StatusBadRequest, err)
		return
	}
	if keyText != "" {
		value, _ := json.Marshal(keyText)
		if _, err := c.SetSecretAs(ctx, src.Secret, value, true, actor(r), "web"); err != nil {
			refuse(http.StatusBadRequest, err)
			return
		}
	}
	replaced, err := reg.Add(ctx, src, actor(r))
	d.audit(ctx, c, r, "hook.add", src.Name, hooks.Detail(src, replaced), err)
	if err != nil {
		refuse(http.StatusInternalServerError, err)
		return
	}
	d.log.Info("dashboard: webhook source saved", zap.String("source", src.Name), zap.Bool("replaced", replaced), zap.String("by", who(r)))
	http.Redirect(w, r, "/webhooks?done="+url.QueryEscape("webhook source "+src.Name+" saved: POST "+baseURL(r)+"/hooks/"+src.Name), http.StatusSeeOther)
}

// checkHookForm refuses what the CLI would, and what only a form can get wrong: a new source
// whose name is taken, an edit of none, a key missing or one a host would refuse.
func (d *Dashboard) checkHookForm(ctx context.Context, reg *hooks.Registry, f hookForm, keyText string, src hooks.Source) error {
	old, exists := findEntry(ctx, reg, f.Name)
	switch {
	case exists && !f.Edit:
		return fmt.Errorf("webhook source %q exists already: edit it, or pick another name", f.Name)
	case !exists && f.Edit:
		return fmt.Errorf("remove webhook source %q: %w (it was removed meanwhile)", f.Name, hooks.ErrNoSource)
	}
	if src.Secret == "" {
		if keyText != "" {
			return fmt.Errorf("webhook source %q: open takes no key", f.Name)
		}
		return nil
	}
	if keyText == "" && (!exists || old.Key == "") {
		return fmt.Errorf("webhook source %q: %s needs a key: the shared secret the sender signs with (hmac) or sends (bearer)", f.Name, src.Auth)
	}
	if keyText != "" {
		value, _ := json.Marshal(keyText)
		return secrets.CheckSet(src.Secret, value, true)
	}
	return nil
}

// findEntry is the registry's entry of source name, if it holds one.
func findEntry(ctx context.Context, reg *hooks.Registry, name string) (hooks.Entry, bool) {
	entries, err := reg.List(ctx)
	if err != nil {
		return hooks.Entry{}, false
	}
	for _, e := range entries {
		if e.Name == name {
			return e, true
		}
	}
	return hooks.Entry{}, false
}

// removeWebhook removes a source as `host hooks rm` does; its deliveries get 404 from then on.
// Its key stays sealed, as the CLI leaves it (`host secrets rm --hook` removes it).
func (d *Dashboard) removeWebhook(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("source")
	ctx, cancel := requestContext(r)
	defer cancel()
	c, err := d.client(ctx)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	reg, err := hooks.BindRegistry(ctx, c.JS)
	if err == nil {
		err = reg.Remove(ctx, name)
		d.audit(ctx, c, r, "hook.rm", name, "", err)
	}
	if err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, hooks.ErrNoSource) {
			code = http.StatusNotFound
		}
		d.serveError(w, r, code, err.Error())
		return
	}
	d.log.Info("dashboard: webhook source removed", zap.String("source", name), zap.String("by", who(r)))
	http.Redirect(w, r, "/webhooks?done="+url.QueryEscape("webhook source "+name+" removed"), http.StatusSeeOther)
}
