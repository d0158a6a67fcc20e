package bus

import (
	"context"
	"errors"
	"fmt"

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
	reg := natscontext.NewRegistry(natscontext.NewDefaultFileBackend())
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

// SaveContext writes a NATS CLI context readable by its owner only (it holds a password), and
// selects it when no context is selected yet, so the host's CLI and a stock `nats` CLI use it
// without flags. It reports whether it selected it.
func SaveContext(c Context, selectIfNone bool) (selected bool, err error) {
	ctx := context.Background()
	reg := natscontext.NewRegistry(natscontext.NewDefaultFileBackend())
	nctx, err := natscontext.New(c.Name, false, natscontext.WithServerURL(c.URL), natscontext.WithUser(c.User), natscontext.WithPassword(c.Password),
		natscontext.WithDescription("written by `host serve --nats-auth`"))
	if err != nil {
		return false, fmt.Errorf("NATS context %q: %w", c.Name, err)
	}
	if err := reg.Save(ctx, nctx, c.Name); err != nil {
		return false, fmt.Errorf("write NATS context %q: %w", c.Name, err)
	}
	if !selectIfNone {
		return false, nil
	}
	cur, err := reg.Selected(ctx)
	if err == nil && cur != "" {
		return false, nil
	}
	if err != nil && !errors.Is(err, natscontext.ErrNoneSelected) {
		return false, fmt.Errorf("read the selected NATS context: %w", err)
	}
	if _, err := reg.Select(ctx, c.Name); err != nil {
		return false, fmt.Errorf("select NATS context %q: %w", c.Name, err)
	}
	return true, nil
}
