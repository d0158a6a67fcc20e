package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/agenthost/host/internal/audit"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/people"
)

// actor is who the CLI acts as: a user's own NATS login (`host users add <name> --nats`), or the
// operator on the hosts' credentials (or on a NATS without users), named by the local user and
// machine (root@vm).
type actor struct {
	name string
	// login says name is the NATS login's user, which the NATS server authenticated; the
	// operator's name is only the CLI's word.
	login bool
}

// actorOf is who the CLI connected as nc acts as.
func actorOf(nc *nats.Conn) actor {
	if u := nc.Opts.User; u != "" && u != bus.HostsUser && people.NameRE.MatchString(u) {
		return actor{name: u, login: true}
	}
	return actor{name: client.CanceledBy()}
}

// start is what a job the CLI queues says of who started it. The operator's is signed by a host
// it asks (only the hosts user may); a NATS login's is a claim, since nothing the CLI sends
// proves who published it (see docs: who started a job).
func (a actor) start() client.Start {
	if a.login {
		return client.Start{By: "NATS login " + a.name}
	}
	return client.Start{By: "operator " + a.name, AskHost: true}
}

// record appends an act the CLI did (or tried: err) to the audit stream; a record that cannot
// be written is said on stderr, the act stands.
func (a actor) record(ctx context.Context, js jetstream.JetStream, act, target, detail string, err error) {
	e := audit.Entry{Who: a.name, Face: "cli", Act: act, Target: target, Detail: detail}
	if err != nil {
		e.Error = err.Error()
	}
	if aerr := audit.Append(ctx, js, e); aerr != nil {
		fmt.Fprintf(os.Stderr, "warning: %s of %s is done, but not in the audit stream: %v\n", act, target, aerr)
	}
}

// warnOnStderr is the client's Warn for the CLI.
func warnOnStderr(err error) { fmt.Fprintln(os.Stderr, "warning:", err) }

func auditCmd(g *globals) *cobra.Command {
	var since, user string
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "audit [--since <duration|time>] [--user <name>] [--json]",
		Short: "List who did what: the administrative acts of every face, oldest first (the AGENT_AUDIT stream)",
		Long: "List who did what: secrets set and removed, webhook sources added and removed, users added, removed and given\n" +
			"tokens, approvals decided (and refused), jobs canceled, dead letters replayed, volumes restored; each with when,\n" +
			"who (a user's name, or the operator's), the face it came through (web, cli, nats, link, host), what it was done to,\n" +
			"and the error of an act that was refused.",
		Args: cobra.NoArgs,
		RunE: g.withClient(time.Minute, func(ctx context.Context, c *client.Client, _ []string) error {
			f := audit.Filter{Who: user, Limit: limit}
			if since != "" {
				var err error
				if f.Since, err = parseSince(since, time.Now()); err != nil {
					return err
				}
			}
			entries, err := audit.Read(ctx, c.JS, f)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(append([]audit.Entry{}, entries...))
			}
			printAudit(entries)
			return nil
		}),
	}
	cmd.Flags().StringVar(&since, "since", "", "only acts since then: a duration back from now (24h, 30m) or a time (2025-06-01, 2025-06-01T12:00:00Z)")
	cmd.Flags().StringVar(&user, "user", "", "only the acts of this user (or operator name, as the WHO column says)")
	cmd.Flags().IntVar(&limit, "limit", 1000, "at most this many, the newest")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// parseSince reads --since: a duration back from now, or a time (RFC 3339, or a date, local).
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("--since %s: give a duration above zero, back from now", s)
		}
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04:05", "2006-01-02 15:04:05", time.DateOnly} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, errors.New("--since " + s + ": want a duration (24h, 30m) or a time (2025-06-01, 2025-06-01T12:00:00Z)")
}

func printAudit(entries []audit.Entry) {
	if len(entries) == 0 {
		fmt.Fprintln(os.Stderr, "no acts recorded (for this filter)")
		return
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tWHO\tFACE\tACT\tTARGET\tDETAIL/ERROR")
	for _, e := range entries {
		detail := e.Detail
		if e.Error != "" {
			detail = "refused: " + e.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.At.Local().Format(time.DateTime), dash(e.Who), dash(e.Face), e.Act, dash(e.Target), oneLineText(detail, 160))
	}
	tw.Flush()
}

// oneLineText keeps a table cell on one line and at most n bytes.
func oneLineText(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
