package dashboard

import (
	"maps"
	"net/http"
	"slices"

	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/secrets"
)

// secretsView is the secrets page: names only. The dashboard binds the store without the host
// key, so it could not read a value if it tried.
type secretsView struct {
	Secrets []secretRow
	Err     string
}

type secretRow struct {
	Name      string
	Stored    bool     // the store has it
	Functions []string // the functions of this host's directory that declare it
}

func (d *Dashboard) secretsPage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := requestContext(r)
	defer cancel()
	v := &secretsView{}
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
	for _, name := range stored {
		row(name).Stored = true
	}
	local, _ := d.localFunctions()
	for _, name := range slices.Sorted(maps.Keys(local)) {
		for _, s := range declaredSecrets(local[name].Spec) {
			row(s).Functions = append(row(s).Functions, name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(rows)) {
		v.Secrets = append(v.Secrets, *rows[name])
	}
	d.render(w, "secrets", v)
}

// localFunctions loads this host's functions directory as `host check` does: the functions
// it would serve, and the files it refuses.
func (d *Dashboard) localFunctions() (map[string]*functions.Function, []error) {
	if d.cfg.FunctionsDir == "" {
		return map[string]*functions.Function{}, nil
	}
	return functions.Load(d.cfg.FunctionsDir)
}
