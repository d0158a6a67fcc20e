package bus

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"

	"github.com/nats-io/jsm.go/natscontext"
	"github.com/nats-io/nats.go"
)

// NATS CLI contexts are read and written by jsm.go's natscontext, the NATS CLI's own
// implementation, so every field a context can hold (nkey, token, user JWT and seed, TLS
// certificate, key and CA, TLS first, SOCKS proxy, inbox prefix, nsc and op:// or env://
// references) means here what it means to `nats`.

// Context is what `host serve --nats-auth` writes into a NATS CLI context.
type Context struct {
	Name     string
	URL      string
	User     string
	Password string
	// InboxPrefix is the prefix the user's permissions let it receive replies under
	// (HostsInboxPrefix, CallerInboxPrefix).
	InboxPrefix string
}

// ConfigRoot is where NATS CLI contexts live: $XDG_CONFIG_HOME, else $HOME/.config. jsm.go's
// default takes the account's home from the user database instead of $HOME, which put the
// contexts of a `serve` run with another $HOME (a service, a test, sudo -E) in /root.
func ConfigRoot() (string, error) {
	if xdg := os.Getenv("XDG_CONFIG_HOME"); xdg != "" {
		return xdg, nil
	}
	home, err := os.UserHomeDir() // $HOME
	if err != nil {
		return "", fmt.Errorf("find the NATS CLI contexts: neither $XDG_CONFIG_HOME nor $HOME is set: %w", err)
	}
	return filepath.Join(home, ".config"), nil
}

func registry() (*natscontext.Registry, error) {
	root, err := ConfigRoot()
	if err != nil {
		return nil, err
	}
	return natscontext.NewRegistry(natscontext.NewFileBackendAt(root)), nil
}

// LoadedContext is a NATS CLI context read from disk.
type LoadedContext struct {
	Name string
	// URL is the context's server URL(s), comma separated.
	URL string

	nctx *natscontext.Context
}

// LoadContext reads the NATS CLI context called name, or the selected one (`nats context
// select`) when name is empty. With no name and no selected context it returns nil, nil.
func LoadContext(name string) (*LoadedContext, error) {
	ctx := context.Background()
	reg, err := registry()
	if err != nil {
		if name == "" {
			return nil, nil // no home: nothing can be selected
		}
		return nil, err
	}
	if name == "" {
		selected, err := reg.Selected(ctx)
		if errors.Is(err, natscontext.ErrNoneSelected) || err == nil && selected == "" {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read the selected NATS context: %w", err)
		}
		name = selected
	}
	nctx, err := reg.Load(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("read NATS context %q: %w; list contexts with `nats context ls`", name, err)
	}
	// The host's streams live in the JetStream of the account it connects to; the CLI reads
	// them there, so a context pointing JetStream elsewhere would read another host's, or none.
	for _, f := range []struct{ field, v string }{
		{"jetstream_domain", nctx.JSDomain()},
		{"jetstream_api_prefix", nctx.JSAPIPrefix()},
		{"jetstream_event_prefix", nctx.JSEventPrefix()},
	} {
		if field, v := f.field, f.v; v != "" {
			return nil, fmt.Errorf("NATS context %q sets %s %q, which the host cannot use: it reads the JetStream of the account it connects to; remove it from %s or use another context",
				name, field, v, nctx.Path())
		}
	}
	return &LoadedContext{Name: name, URL: nctx.ServerURL(), nctx: nctx}, nil
}

// User is the NATS user the context logs in as; "" when it uses another credential (creds,
// nkey, token) or none.
func (c *LoadedContext) User() string { return c.nctx.User() }

// Options are the nats.Options for everything the context sets: credentials, TLS, inbox
// prefix, proxy. With ownAuth the caller brings its own credentials (--creds, --user), which
// replace the context's: the TLS and the rest still apply.
func (c *LoadedContext) Options(ownAuth bool) ([]nats.Option, error) {
	opts, err := c.nctx.NATSOptions()
	if err != nil {
		return nil, fmt.Errorf("NATS context %q: %w", c.Name, err)
	}
	if ownAuth {
		opts = append(opts, withoutAuth)
	}
	return opts, nil
}

// withoutAuth clears every credential earlier options set.
func withoutAuth(o *nats.Options) error {
	o.UserJWT, o.SignatureCB, o.Nkey = nil, nil, ""
	o.User, o.Password, o.UserInfo = "", "", nil
	o.Token, o.TokenHandler = "", nil
	return nil
}

// Context names `host serve --nats-auth` writes: the hosts user (for the host's CLI) and the
// callers user (for applications, or `nats --context host-callers req agent.call.<fn> ...`).
const (
	HostsContext   = "host"
	CallersContext = "host-callers"
)

// savedBy marks the contexts serve writes, so that it rewrites its own and nobody else's.
const savedBy = "written by `host serve --nats-auth`"

// Saved says where SaveContext put a context.
type Saved struct {
	// Name is the context's name: the one asked for, or, when that one names another server
	// or was not written by serve, that name with the port after it (host-4223).
	Name string
	// Displaced is the server URL of the context that kept the name asked for; "" when the
	// context got that name.
	Displaced string
	// Selected says SaveContext selected it: nothing was selected before.
	Selected bool
	// SelectedName is the context selected after the save (Name when Selected).
	SelectedName string
}

// SaveContext writes a NATS CLI context readable by its owner only (it holds a password), and
// selects it when no context is selected yet, so the host's CLI and a stock `nats` CLI use it
// without flags.
//
// It never replaces a context that says how to reach another server, nor one serve did not
// write: a second serve (another data directory, another port) overwriting "host" would send
// every later command of whoever selected it, `host secrets set` included, to a server they
// did not choose. Such a context keeps its name and this one is saved under the name with the
// port after it; the selection is left as it is.
func SaveContext(c Context, selectIfNone bool) (Saved, error) {
	ctx := context.Background()
	reg, err := registry()
	if err != nil {
		return Saved{}, fmt.Errorf("write NATS context %q: %w", c.Name, err)
	}
	out := Saved{Name: c.Name}
	for n := 1; ; n++ {
		if n > 100 {
			return Saved{}, fmt.Errorf("write NATS context %q: it and 99 alternatives name other servers; remove some with `nats context rm`", c.Name)
		}
		candidate := alternativeName(c.Name, c.URL, n)
		prev, err := reg.Load(ctx, candidate)
		if errors.Is(err, natscontext.ErrNotFound) || err == nil && prev.Description() == savedBy && prev.ServerURL() == c.URL {
			out.Name = candidate
			break
		}
		if err != nil {
			return Saved{}, fmt.Errorf("read NATS context %q before writing it: %w", candidate, err)
		}
		if n == 1 {
			out.Displaced = prev.ServerURL()
		}
	}
	opts := []natscontext.Option{natscontext.WithServerURL(c.URL), natscontext.WithUser(c.User), natscontext.WithPassword(c.Password),
		natscontext.WithDescription(savedBy)}
	if c.InboxPrefix != "" {
		opts = append(opts, natscontext.WithInboxPrefix(c.InboxPrefix))
	}
	nctx, err := natscontext.New(out.Name, false, opts...)
	if err != nil {
		return Saved{}, fmt.Errorf("NATS context %q: %w", out.Name, err)
	}
	if err := reg.Save(ctx, nctx, out.Name); err != nil {
		return Saved{}, fmt.Errorf("write NATS context %q: %w", out.Name, err)
	}
	cur, err := reg.Selected(ctx)
	if err != nil && !errors.Is(err, natscontext.ErrNoneSelected) {
		return out, fmt.Errorf("read the selected NATS context: %w", err)
	}
	out.SelectedName = cur
	if !selectIfNone || cur != "" {
		return out, nil
	}
	if _, err := reg.Select(ctx, out.Name); err != nil {
		return out, fmt.Errorf("select NATS context %q: %w", out.Name, err)
	}
	out.Selected, out.SelectedName = true, out.Name
	return out, nil
}

// alternativeName is the n-th name SaveContext tries for a context of base reaching serverURL:
// base itself, then base-<port>, then base-<port>-<n>.
func alternativeName(base, serverURL string, n int) string {
	if n == 1 {
		return base
	}
	port := "server"
	if u, err := url.Parse(serverURL); err == nil && u.Port() != "" {
		port = u.Port()
	}
	if n == 2 {
		return base + "-" + port
	}
	return base + "-" + port + "-" + strconv.Itoa(n-1)
}
