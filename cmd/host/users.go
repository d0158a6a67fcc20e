package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/people"
	"github.com/agenthost/host/internal/useradmin"
)

func usersCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "users",
		Short: "Manage the people who log in (web, NATS): their roles, groups and tokens; with the hosts credentials",
		Long: `Users log in to the dashboard with their token, and, added with --nats, to NATS as themselves, held to their role by the NATS server.

Roles, each including the ones before it: viewer (reads jobs, flows, logs, functions), runner (runs functions; --functions narrows which), approver (decides the approvals of its groups), developer (hooks, schedules, deploys), admin (secrets, users, volume restores).

These commands take the hosts credentials (the operator's CLI): a user's own NATS login may not manage users. Every act, refused ones too, is recorded in the audit stream.`,
	}
	cmd.AddCommand(usersAddCmd(g), usersLsCmd(g), usersRmCmd(g), usersTokenCmd(g), usersNATSConfigCmd(g))
	return cmd
}

func usersAddCmd(g *globals) *cobra.Command {
	var n useradmin.NewUser
	cmd := &cobra.Command{
		Use:   "add <name> --role <role>",
		Short: "Add a user and print its first login token (shown only now)",
		Long: `Add a user and print its first login token (shown only now).

On this command --nats is the switch that gives the user a NATS login, not the server's URL: name the server with $NATS_URL or --context.`,
		Args: func(cmd *cobra.Command, args []string) error {
			for _, a := range args {
				if len(args) == 2 && looksLikeURL(a) {
					return fmt.Errorf("on `host users add`, --nats gives the user a NATS login and takes no value; name the server %s with $NATS_URL or --context", a)
				}
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		RunE: g.withUsers(func(ctx context.Context, a *useradmin.Admin, s *session, args []string) error {
			n.Name = args[0]
			u, token, err := a.Add(ctx, n)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "user %s added (%s); its login token follows, shown only now (only a hash is kept; `host users token %s` issues another):\n", u.Name, describe(u), u.Name)
			fmt.Println(token)
			if u.NATS {
				g.reportNATSLogin(ctx, a, s, u.Name, token)
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&n.Role, "role", "", "the user's role: "+strings.Join(people.Roles(), ", ")+" (required)")
	cmd.Flags().StringArrayVar(&n.Groups, "group", nil, "a group the user is in, for approvals limited to groups (repeatable)")
	cmd.Flags().StringVar(&n.Functions, "functions", "", "the functions the user may run, as a glob (greet*); empty is every function")
	// It shadows the global --nats (the server's URL) on this command, as the issue names it.
	cmd.Flags().BoolVar(&n.NATS, "nats", false, "give the user a NATS login (user <name>, password its token), held to its role by the NATS server; the server's URL then comes from $NATS_URL or --context")
	cmd.Flags().StringSliceVar(&n.Topics, "topics", nil, "subjects or MQTT topic filters its NATS login may publish and subscribe to beyond its role, e.g. sensors/# for an MQTT device (serve --mqtt-listen) or s3.events for an S3 server's notifications; not under agent., webhook., $ or _INBOX (comma separated)")
	cmd.MarkFlagRequired("role")
	return cmd
}

func usersLsCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List the users (never their tokens)",
		Args:  cobra.NoArgs,
		RunE: g.withUsers(func(ctx context.Context, a *useradmin.Admin, _ *session, _ []string) error {
			users, err := a.List(ctx)
			if err != nil {
				return err
			}
			listed := make([]useradmin.Listed, len(users))
			for i, u := range users {
				listed[i] = useradmin.View(u)
			}
			if asJSON {
				return printJSON(listed)
			}
			if len(listed) == 0 {
				fmt.Println("no users: the web token and the hosts credentials are the only logins (host users add <name> --role <role> adds one)")
				return nil
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tROLE\tGROUPS\tFUNCTIONS\tNATS\tTOKEN\tCREATED BY")
			for _, u := range listed {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", u.Name, u.Role, orDash(strings.Join(u.Groups, ",")), orDash(u.Functions),
					yesNo(u.NATS), tokenSaid(u), orDash(u.CreatedBy))
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func usersRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rm <name>",
		Short: "Remove a user: its web and NATS logins stop working",
		Args:  cobra.ExactArgs(1),
		RunE: g.withUsers(func(ctx context.Context, a *useradmin.Admin, _ *session, args []string) error {
			u, err := a.Remove(ctx, args[0])
			if err != nil {
				return err
			}
			fmt.Printf("user %s removed; its token no longer logs in\n", u.Name)
			if u.NATS {
				fmt.Fprintf(os.Stderr, "its NATS login is refused at once by hosts serving with --nats-auth (their open connections closed); on a NATS you run, remove its entry from the configuration (`host users nats-config` prints the logins left) and reload it\n")
			}
			return nil
		}),
	}
}

func usersTokenCmd(g *globals) *cobra.Command {
	var tokenFile string
	cmd := &cobra.Command{
		Use:   "token <name>",
		Short: "Issue (or rotate) a user's login token: the old one stops working",
		Args:  cobra.ExactArgs(1),
		RunE: g.withUsers(func(ctx context.Context, a *useradmin.Admin, s *session, args []string) error {
			chosen := ""
			if tokenFile != "" {
				b, err := os.ReadFile(tokenFile)
				if err != nil {
					return fmt.Errorf("--token-file: %w", err)
				}
				if chosen = strings.TrimSpace(string(b)); chosen == "" {
					return fmt.Errorf("--token-file %s is empty: put a token of at least %d characters in it, or leave the flag out and one is made", tokenFile, people.MinTokenLen)
				}
			}
			token, u, err := a.Token(ctx, args[0], chosen)
			if err != nil {
				return err
			}
			if chosen != "" {
				fmt.Fprintf(os.Stderr, "user %s now logs in with the token in %s; the old one no longer works\n", u.Name, tokenFile)
			} else {
				fmt.Fprintf(os.Stderr, "user %s has a new login token, shown only now (only a hash is kept); the old one no longer works:\n", u.Name)
				fmt.Println(token)
			}
			if u.NATS {
				g.reportNATSLogin(ctx, a, s, u.Name, token)
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&tokenFile, "token-file", "", fmt.Sprintf("read the token from this file instead of making one (at least %d characters)", people.MinTokenLen))
	return cmd
}

func usersNATSConfigCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "nats-config [name...]",
		Short: "Print the users' NATS logins as a nats-server authorization block, for a NATS you run",
		RunE: g.withUsers(func(ctx context.Context, a *useradmin.Admin, _ *session, args []string) error {
			block, err := a.NATSConfig(ctx, args...)
			if err != nil {
				return err
			}
			fmt.Print(block)
			return nil
		}),
	}
}

// withUsers runs a users command on a connection with the hosts credentials. A login the
// server refuses the JetStream API (a user's own NATS login) is told that managing users takes
// the hosts credentials, the server's refusal being the check.
func (g *globals) withUsers(run func(ctx context.Context, a *useradmin.Admin, s *session, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
		defer cancel()
		log, err := newLogger(g.logLevel)
		if err != nil {
			return err
		}
		s, err := g.dial(ctx)
		if err != nil {
			return err
		}
		defer s.nc.Close()
		ctx, stop := s.guard(ctx)
		defer stop()
		js, err := jetstream.New(s.nc)
		if err != nil {
			return fmt.Errorf("open JetStream: %w", err)
		}
		// The same name as every other act of the CLI's (actorOf), so `host audit --user` finds
		// them all.
		a, err := useradmin.Open(ctx, js, actorOf(s.nc).name, "cli", log)
		if err == nil {
			err = run(ctx, a, s, args)
		}
		if d := s.Denied(); d != nil && err != nil {
			login := s.login
			if login == "" {
				login = "(" + s.nc.Opts.Name + ")"
			}
			return fmt.Errorf("your NATS login %s may not manage users: it takes the hosts credentials (an admin on the host); the NATS server refused %s to %s", login, d.Op, d.Subject)
		}
		return err
	}
}

// reportNATSLogin says whether the NATS server the CLI is connected to enforces name's new
// login, by logging in with it; where it does not, it prints the block for a NATS one runs.
func (g *globals) reportNATSLogin(ctx context.Context, a *useradmin.Admin, s *session, name, token string) {
	url := s.nc.ConnectedUrlRedacted()
	check := useradmin.CheckLogin(ctx, name, url, s.nc.AuthRequired(), 5*time.Second, func(ctx context.Context) error {
		as := *g
		as.creds, as.user, as.password = "", name, token
		p, err := as.dial(ctx)
		if err == nil {
			p.nc.Close()
		}
		return err
	})
	fmt.Fprintln(os.Stderr, check.Say)
	if !check.InEffect {
		if block, err := a.NATSConfig(ctx, name); err != nil {
			fmt.Fprintf(os.Stderr, "could not print its NATS configuration: %v\n", err)
		} else {
			fmt.Fprint(os.Stderr, block)
		}
	}
	fmt.Fprintf(os.Stderr, "log in as %s: host --user %s --password <token> invoke <function> ..., or nats --user %s --password <token> --inbox-prefix %s ... (replies come only under that prefix)\n",
		name, name, name, bus.CallerInboxPrefix(name))
}

func looksLikeURL(s string) bool {
	return strings.Contains(s, "://") || strings.Count(s, ":") == 1 && !strings.HasPrefix(s, "-")
}

func describe(u people.User) string {
	parts := []string{"role " + u.Role.String()}
	if len(u.Groups) > 0 {
		parts = append(parts, "groups "+strings.Join(u.Groups, ","))
	}
	if len(u.Topics) > 0 {
		parts = append(parts, "topics "+strings.Join(u.Topics, ","))
	}
	if u.Functions != "" {
		parts = append(parts, "functions "+u.Functions)
	}
	if u.NATS {
		parts = append(parts, "a NATS login")
	}
	return strings.Join(parts, ", ")
}

func tokenSaid(u useradmin.Listed) string {
	if !u.Token {
		return "none"
	}
	return u.TokenAt.Local().Format(time.DateTime)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
