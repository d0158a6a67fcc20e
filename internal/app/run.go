package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
)

// ServeConfig is everything `host serve` runs with once its flags are read: the host's
// Config, where the HTTP face listens, and which NATS to use.
type ServeConfig struct {
	Config
	// HTTPAddr is where the dashboard, /run, /hooks, /mcp and /metrics listen.
	HTTPAddr string
	// DrainTimeout bounds how long a stop waits for running jobs.
	DrainTimeout time.Duration
	// Connect reaches an external NATS; with Embedded set, it is pointed at that server.
	Connect bus.ConnectOptions
	// Embedded, when not nil, is the NATS server to start in process (serve without --nats).
	// Its StoreDir is the data directory's nats/ when empty.
	Embedded *bus.ServerConfig
	// EmbeddedAuth makes the embedded server require the generated hosts and callers users
	// (serve --nats-auth), kept in the data directory's nats-auth.json.
	EmbeddedAuth bool
}

// Run serves until ctx ends, then drains: the HTTP listener first (a taken port fails before
// anything else starts), the embedded NATS server if asked for, the connection, the host and
// its HTTP face. It is `host serve` without the flags.
func Run(ctx context.Context, cfg ServeConfig, log *zap.Logger) error {
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on --http %s: %w (pick another address)", cfg.HTTPAddr, err)
	}
	defer ln.Close()
	if cfg.ApprovalURL == "" {
		cfg.ApprovalURL = "http://" + ln.Addr().String()
	}
	cfg.ApprovalURL = strings.TrimSuffix(cfg.ApprovalURL, "/")

	var embedded *bus.Embedded
	if cfg.Embedded != nil {
		var stopNATS func()
		if embedded, stopNATS, err = startNATS(&cfg, log); err != nil {
			return err
		}
		defer stopNATS()
	}
	nc, err := bus.Connect(ctx, cfg.Connect, log)
	if err != nil {
		return err
	}
	defer nc.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	h, err := New(ctx, cfg.Config, nc, log, reg)
	if err != nil {
		return err
	}
	if err := h.Start(ctx); err != nil {
		return err
	}
	if err := followLogins(ctx, embedded, cfg.EmbeddedAuth, nc, h, log); err != nil {
		return err
	}
	// Header and idle timeouts bound what a client that stalls can hold; bodies are bounded
	// per route (hooks: --hook-body-timeout), since a long response stream is no stall.
	httpSrv := &http.Server{Handler: h.Handler(reg), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() {
		if err := httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("HTTP server stopped", zap.Error(err))
		}
	}()
	log.Info("serving", zap.String("http", ln.Addr().String()), zap.Bool("http_token", cfg.Web.Token != ""))

	<-ctx.Done()
	log.Info("shutting down: draining", zap.Duration("drain_timeout", cfg.DrainTimeout))
	drainCtx, cancel := context.WithTimeout(context.Background(), cfg.DrainTimeout)
	defer cancel()
	_ = h.Shutdown(drainCtx)
	shutCtx, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	_ = httpSrv.Shutdown(shutCtx)
	if err := nc.Drain(); err != nil {
		log.Warn("draining the NATS connection", zap.Error(err))
	}
	log.Info("stopped")
	return nil
}

// startNATS starts the embedded NATS server and points cfg.Connect at it, in process, and
// cfg.Store at its store; stop shuts it down.
func startNATS(cfg *ServeConfig, log *zap.Logger) (srv *bus.Embedded, stop func(), err error) {
	if err := os.MkdirAll(cfg.DataDir, 0o711); err != nil {
		return nil, nil, fmt.Errorf("create data directory %s: %w", cfg.DataDir, err)
	}
	sc := *cfg.Embedded
	if sc.StoreDir == "" {
		sc.StoreDir = filepath.Join(cfg.DataDir, "nats")
	}
	if cfg.EmbeddedAuth {
		authFile := filepath.Join(cfg.DataDir, "nats-auth.json")
		if sc.Auth, err = bus.LoadOrCreateAuth(authFile); err != nil {
			return nil, nil, err
		}
		cfg.Connect.Creds, cfg.Connect.User, cfg.Connect.Password = "", sc.Auth.Hosts.User, sc.Auth.Hosts.Password
	}
	srv, err = bus.StartEmbedded(sc, log)
	if err != nil {
		return nil, nil, err
	}
	if sc.Auth != nil {
		saveAuthContexts(srv.ClientURL(), sc.Auth, log)
	}
	stop = func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
	cfg.Connect.InProcess = srv.Server
	if cfg.Store, err = bus.NewEmbeddedStore(srv.Server); err != nil {
		stop()
		return nil, nil, err
	}
	log.Info("embedded NATS server started", zap.String("listen", srv.ClientURL()), zap.Bool("sync_always", sc.SyncInterval == 0))
	return srv, stop, nil
}

// saveAuthContexts writes the NATS CLI contexts for the generated users, so that `host jobs` and
// friends (and a stock `nats` CLI) connect without flags. A failure only costs convenience. A
// context of the same name that reaches another server is kept (bus.SaveContext), and the log
// says which name this server's context got and that the selection did not change.
func saveAuthContexts(clientURL string, auth *bus.Auth, log *zap.Logger) {
	for _, c := range []struct {
		ctx    bus.Context
		choose bool
	}{
		{bus.Context{Name: bus.HostsContext, URL: clientURL, User: auth.Hosts.User, Password: auth.Hosts.Password, InboxPrefix: bus.HostsInboxPrefix}, true},
		{bus.Context{Name: bus.CallersContext, URL: clientURL, User: auth.Callers.User, Password: auth.Callers.Password, InboxPrefix: bus.CallersInboxPrefix}, false},
	} {
		saved, err := bus.SaveContext(c.ctx, c.choose)
		if err != nil {
			log.Warn("could not write the NATS CLI context; pass --user and --password to the CLI instead", zap.String("context", c.ctx.Name), zap.Error(err))
			continue
		}
		root, _ := bus.ConfigRoot()
		fields := []zap.Field{zap.String("context", saved.Name), zap.String("user", c.ctx.User), zap.String("url", clientURL),
			zap.String("dir", filepath.Join(root, "nats", "context")), zap.Bool("selected", saved.Selected)}
		if saved.Displaced != "" {
			log.Warn(fmt.Sprintf("NATS CLI context %q reaches another server (or was not written by serve) and was left as it is, and so was the selected context; this server's context is %q: pass --context %s, or `nats context select %s`",
				c.ctx.Name, saved.Name, saved.Name, saved.Name),
				append(fields, zap.String("kept", c.ctx.Name), zap.String("kept_url", saved.Displaced), zap.String("still_selected", saved.SelectedName))...)
			continue
		}
		log.Info("wrote NATS CLI context", append(fields, zap.String("now_selected", saved.SelectedName))...)
	}
}
