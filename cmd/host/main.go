// Command host runs functions on NATS: `host serve` serves them, the other commands talk to
// the NATS that hosts serve on.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/term"

	"github.com/agenthost/host/internal/client"
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
	root.PersistentFlags().StringVar(&logFormat, "log-format", "auto", "log format: console (for people), json (for machines), or auto: console on a terminal, json otherwise")
	root.AddCommand(serveCmd(g), invokeCmd(g), jobsCmd(g), jobCmd(g), cancelCmd(g), approveCmd(g), approvalsCmd(g), auditCmd(g), functionsCmd(g), flowCmd(g), deadCmd(g), secretsCmd(g), usersCmd(g), hooksCmd(g), volumesCmd(g), schedulesCmd(g), logsCmd(g), checkCmd(), wiringCmd(), newCmd(), benchCmd(g), versionCmd())
	root.AddCommand(deployCmds(g)...)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(exitStatus(err))
	}
}

// exitStatus is 1 for any error, unless the error chose its own (see couldNotRun).
func exitStatus(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

// exitError lets a command choose its exit status with an error that prints as it is.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// couldNotRun marks an error that kept a job from being queued at all: exit status 2, so that a
// script tells "it never ran" (fix the call) from "it ran and failed" (1). nil stays nil.
func couldNotRun(err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: 2, err: err}
}

// logFormat is the --log-format flag. It is read by newLogger rather than passed to it so that
// every caller of newLogger follows the flag.
var logFormat = "auto"

// newLogger logs to stderr for people on a terminal and as JSON lines for machines otherwise
// (--log-format auto), or as --log-format says.
func newLogger(level string) (*zap.Logger, error) {
	return buildLogger(level, logFormat, os.Stderr, isTerminal(os.Stderr))
}

// buildLogger logs at level to out. Stack traces are left out below DPanic: an error a user
// caused (a refused function, a bad payload) is said in its message; a trace would bury it.
func buildLogger(level, format string, out zapcore.WriteSyncer, tty bool) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", level, err)
	}
	var enc zapcore.Encoder
	switch format {
	case "auto", "console", "json":
	default:
		return nil, fmt.Errorf("--log-format %q: want auto, console or json", format)
	}
	if format == "console" || (format == "auto" && tty) {
		ec := zap.NewDevelopmentEncoderConfig()
		if tty {
			ec.EncodeLevel = zapcore.CapitalColorLevelEncoder
		}
		enc = zapcore.NewConsoleEncoder(ec)
	} else {
		ec := zap.NewProductionEncoderConfig()
		ec.TimeKey = "time"
		ec.EncodeTime = zapcore.ISO8601TimeEncoder
		enc = zapcore.NewJSONEncoder(ec)
	}
	core := zapcore.NewCore(enc, zapcore.Lock(out), lvl)
	return zap.New(core, zap.AddCaller(), zap.AddStacktrace(zapcore.DPanicLevel), zap.ErrorOutput(zapcore.Lock(os.Stderr))), nil
}

func isTerminal(f *os.File) bool {
	return term.IsTerminal(int(f.Fd()))
}

// connectNATS opens the NATS connection alone, for a command that needs no job records (a
// user's own login reads none), as the flags and the NATS context say.
func (g *globals) connectNATS(ctx context.Context) (*nats.Conn, error) {
	s, err := g.dial(ctx)
	if err != nil {
		return nil, err
	}
	return s.nc, nil
}

// connect opens a client connection for the non-serve commands. A login the server refuses
// the JetStream API (a user's NATS login) fails at once, saying so.
func (g *globals) connect(ctx context.Context) (*client.Client, func(), error) {
	s, err := g.dial(ctx)
	if err != nil {
		return nil, nil, err
	}
	c, err := s.client(ctx)
	if err != nil {
		s.nc.Close()
		return nil, nil, err
	}
	return c, s.nc.Close, nil
}
