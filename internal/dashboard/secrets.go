package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/secrets"
)

// secretsView is the secrets page: names only. The dashboard binds the store without the host
// key, so it could not read a value if it tried; it sets and removes through a host
// (agent.admin.secrets.*), which seals with its own key.
type secretsView struct {
	session // who the page is shown to
	Secrets []secretRow
	Err     string
	// Done says what the last change did ("secret x rotated"); never a value.
	Done string
	// Name is the name of a refused set, kept in the form; the value never is.
	Name    string
	MinLen  int
	AsJSON  bool
	FormErr string
}

type secretRow struct {
	Name      string
	Stored    bool     // the store has it
	Functions []string // the functions of this host's directory that declare it
	Sealed    bool     // a function declares it on a sealed env: line ($sealed:)
}

// maxSecretForm bounds a set's form body: a secret is a credential, not a document.
const maxSecretForm = 64 << 10

func (d *Dashboard) secretsPage(w http.ResponseWriter, r *http.Request) {
	v := &secretsView{Done: r.URL.Query().Get("done")}
	d.renderSecrets(w, r, v, http.StatusOK)
}

func (d *Dashboard) renderSecrets(w http.ResponseWriter, r *http.Request, v *secretsView, status int) {
	ctx, cancel := requestContext(r)
	defer cancel()
	v.MinLen = secrets.MinRedactLen
	rows := map[string]*secretRow{}
	row := func(name string) *secretRow {
		if rows[name] == nil {
			rows[name] = &secretRow{Name: name}
		}
		return rows[name]
	}
	c, err := d.client(ctx)
	var stored []string
	if err == nil {
		var st *secrets.Store
		if st, err = secrets.Bind(ctx, c.JS, nil); err == nil {
			stored, err = st.List(ctx)
		}
	}
	if err != nil {
		v.Err = err.Error()
	}
	have := storedSet{}
	for _, name := range stored {
		row(name).Stored = true
		have[name] = true
	}
	local, _ := d.localFunctions()
	for _, name := range slices.Sorted(maps.Keys(local)) {
		for _, s := range declaredSecrets(local[name].Spec) {
			row(s).Functions = append(row(s).Functions, name)
		}
		for _, ref := range local[name].Spec.SealedSecrets() {
			r := row(have.sealedName(ref, local[name].Spec))
			r.Sealed = true
			if !slices.Contains(r.Functions, name) {
				r.Functions = append(r.Functions, name)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(rows)) {
		v.Secrets = append(v.Secrets, *rows[name])
	}
	if status != http.StatusOK {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(status)
	}
	d.render(w, r, "secrets", v)
}

// setSecret sets or rotates a secret through a host. The form's value is text, taken as a JSON
// string, unless "json" is checked. What the host would refuse is refused here first, in the
// host's words (secrets.CheckSet), and the host checks again.
func (d *Dashboard) setSecret(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxSecretForm)
	if err := r.ParseForm(); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			d.renderSecrets(w, r, &secretsView{FormErr: "the form is over the 64 KiB a secret may take"}, http.StatusRequestEntityTooLarge)
			return
		}
		d.renderSecrets(w, r, &secretsView{FormErr: "the form cannot be read: " + err.Error()}, http.StatusBadRequest)
		return
	}
	name, text, asJSON := r.PostForm.Get("name"), r.PostForm.Get("value"), r.PostForm.Get("json") != ""
	refuse := func(msg string) {
		d.log.Info("dashboard: secret change refused", zap.String("name", name), zap.String("reason", msg), zap.String("by", who(r)))
		d.renderSecrets(w, r, &secretsView{FormErr: msg, Name: name, AsJSON: asJSON}, http.StatusBadRequest)
	}
	if text == "" {
		refuse("a value is needed")
		return
	}
	value := json.RawMessage(text)
	if !asJSON {
		value, _ = json.Marshal(text)
	}
	if err := secrets.CheckSet(name, value, false); err != nil {
		refuse(err.Error())
		return
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	c, err := d.client(ctx)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	replaced, err := c.SetSecretAs(ctx, name, value, false, actor(r), "web")
	if err != nil {
		refuse(err.Error())
		return
	}
	done := "secret " + name + " set"
	if replaced {
		done = "secret " + name + " rotated: jobs that start from now on get the new value"
	}
	d.log.Info("dashboard: "+done, zap.String("name", name), zap.Bool("rotated", replaced), zap.String("by", who(r)))
	http.Redirect(w, r, "/secrets?done="+url.QueryEscape(done), http.StatusSeeOther)
}

// removeSecret removes a secret through a host.
func (d *Dashboard) removeSecret(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxSecretForm)
	if err := r.ParseForm(); err != nil {
		d.renderSecrets(w, r, &secretsView{FormErr: "the form cannot be read: " + err.Error()}, http.StatusBadRequest)
		return
	}
	name := r.PostForm.Get("name")
	ctx, cancel := requestContext(r)
	defer cancel()
	c, err := d.client(ctx)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	if err := c.RemoveSecretAs(ctx, name, false, actor(r), "web"); err != nil {
		d.log.Info("dashboard: secret removal refused", zap.String("name", name), zap.Error(err), zap.String("by", who(r)))
		d.renderSecrets(w, r, &secretsView{FormErr: err.Error()}, http.StatusBadRequest)
		return
	}
	d.log.Info("dashboard: secret removed", zap.String("name", name), zap.String("by", who(r)))
	http.Redirect(w, r, "/secrets?done="+url.QueryEscape("secret "+name+" removed"), http.StatusSeeOther)
}

// storedSet is the names of the secrets the store holds, when they could be listed.
type storedSet map[string]bool

// name is the stored secret a sealed env: line's ref resolves to, as the runner resolves it
// (secrets.Store.ResolveField): the whole ref, else the name before its last dot (a field of
// that secret's JSON object); the ref itself when neither is stored.
func (st storedSet) name(ref string) string {
	if st[ref] {
		return ref
	}
	if i := strings.LastIndexByte(ref, '.'); i > 0 && st[ref[:i]] {
		return ref[:i]
	}
	return ref
}

// sealedName is the row a sealed ref of spec's is listed under: the secret it resolves to, or,
// when none is stored, the secret whose field it names if spec declares that secret too (the
// templates' "secrets: anthropic" beside "$sealed:anthropic.apiKey": one secret to set).
func (st storedSet) sealedName(ref string, spec *annot.Spec) string {
	name := st.name(ref)
	if i := strings.LastIndexByte(ref, '.'); !st[name] && i > 0 && spec.DeclaresSecret(ref[:i]) {
		return ref[:i]
	}
	return name
}

// has says whether the secret a ref names is stored.
func (st storedSet) has(ref string) bool { return st[st.name(ref)] }

// storedSecrets lists what the secret store holds; nil when it cannot be read.
func storedSecrets(ctx context.Context, c *client.Client) storedSet {
	st, err := secrets.Bind(ctx, c.JS, nil)
	if err != nil {
		return nil
	}
	names, err := st.List(ctx)
	if err != nil {
		return nil
	}
	have := storedSet{}
	for _, n := range names {
		have[n] = true
	}
	return have
}

// localFunctions loads this host's functions directory as `host check` does: the functions
// it would serve, and the files it refuses.
func (d *Dashboard) localFunctions() (map[string]*functions.Function, []error) {
	dir := d.cfg.FunctionsDir
	if d.cfg.FunctionsDirOf != nil {
		dir = d.cfg.FunctionsDirOf()
	}
	if dir == "" {
		return map[string]*functions.Function{}, nil
	}
	return functions.Load(dir)
}
