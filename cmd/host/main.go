// Command host runs functions on NATS: `host serve` serves them, the other commands talk to
// the NATS that hosts serve on.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/term"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/egress"
)

// globals are the connection flags every command shares, named as the NATS CLI names them.
type globals struct {
	natsURL  string
	creds    string
	user     string
	password string
	context  string
	logLevel string
}

func main() {
	// Inside a jail this binary is the job's init, forwarding its proxy connections; that run
	// never returns here.
	egress.MaybeRunInit()
	g := &globals{}
	root := &cobra.Command{
		Use:           "host",
		Short:         "Event-driven functions on NATS, run in a jail",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       versionText(),
	}
	root.PersistentFlags().StringVar(&g.natsURL, "nats", os.Getenv("NATS_URL"), "NATS server URL (default: $NATS_URL; for serve: empty starts an embedded server)")
	root.PersistentFlags().StringVar(&g.creds, "creds", os.Getenv("NATS_CREDS"), "NATS credentials file (default: $NATS_CREDS)")
	root.PersistentFlags().StringVar(&g.user, "user", os.Getenv("NATS_USER"), "NATS user (default: $NATS_USER)")
	root.PersistentFlags().StringVar(&g.password, "password", os.Getenv("NATS_PASSWORD"), "NATS password (default: $NATS_PASSWORD)")
	root.PersistentFlags().StringVar(&g.context, "context", "", "NATS CLI context to use (default: the selected one, when --nats and $NATS_URL are unset)")
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	root.AddCommand(serveCmd(g), invokeCmd(g), jobsCmd(g), jobCmd(g), flowCmd(g), deadCmd(g), secretsCmd(g), volumesCmd(g), logsCmd(g), checkCmd(), benchCmd(g), versionCmd())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		var ec exitCode
		if errors.As(err, &ec) {
			os.Exit(int(ec))
		}
		os.Exit(1)
	}
}

// exitCode lets a command choose its exit status with an error that still prints.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// newLogger logs for people on a terminal and as JSON lines for machines otherwise.
func newLogger(level string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", level, err)
	}
	var cfg zap.Config
	if isTerminal(os.Stderr) {
		cfg = zap.NewDevelopmentConfig()
		cfg.EncoderConfig.EncodeLevel = zapcore.CapitalColorLevelEncoder
		cfg.DisableStacktrace = true
	} else {
		cfg = zap.NewProductionConfig()
		cfg.EncoderConfig.TimeKey = "time"
		cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	}
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	return cfg.Build()
}

func isTerminal(f *os.File) bool {
	return term.IsTerminal(int(f.Fd()))
}

// connect opens a client connection for the non-serve commands.
func (g *globals) connect(ctx context.Context) (*client.Client, func(), error) {
	url := g.natsURL
	ownAuth := g.creds != "" || g.user != ""
	var ctxOpts []nats.Option
	if url == "" || g.context != "" {
		nctx, err := bus.LoadContext(g.context)
		if err != nil {
			return nil, nil, err
		}
		if nctx != nil {
			url = nctx.URL
			if ctxOpts, err = nctx.Options(ownAuth); err != nil {
				return nil, nil, err
			}
		}
	}
	if url == "" {
		url = nats.DefaultURL
	}
	nc, err := bus.Connect(ctx, bus.ConnectOptions{URL: url, Creds: g.creds, User: g.user, Password: g.password, Options: ctxOpts, Name: "host-cli", MaxWait: 2 * time.Second}, zap.NewNop())
	if err != nil {
		return nil, nil, err
	}
	c, err := client.New(ctx, nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return c, nc.Close, nil
}
