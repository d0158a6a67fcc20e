package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/hooks"
	"github.com/agenthost/host/internal/secrets"
)

func hooksCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "hooks", Short: "Manage webhook sources (POST /hooks/<source>) on every host, without a restart",
		Long: "Manage webhook sources (POST /hooks/<source>) on every host, without a restart.\n\n" +
			"Sources added here are kept in the " + hooks.SourcesBucket + " bucket, which every host watches: an added source takes\n" +
			"deliveries at once, a removed one answers 404 at once. A source of the same name declared with serve --hook\n" +
			"wins on the host that declares it. A source names its key (--key); set the key's value with\n" +
			"host secrets set --hook <key> '\"<value>\"' (it is sealed in the webhook key store, never stored here)."}
	withRegistry := func(run func(ctx context.Context, c *client.Client, reg *hooks.Registry, args []string) error) func(*cobra.Command, []string) error {
		return g.withClient(30*time.Second, func(ctx context.Context, c *client.Client, args []string) error {
			reg, err := hooks.BindRegistry(ctx, c.JS)
			if err != nil {
				return err
			}
			return run(ctx, c, reg, args)
		})
	}
	var key string
	add := &cobra.Command{
		Use:   "add <source> hmac|bearer|open [--key <key>]",
		Short: "Add (or replace) a webhook source on every host",
		Args:  cobra.ExactArgs(2),
		RunE: withRegistry(func(ctx context.Context, c *client.Client, reg *hooks.Registry, args []string) error {
			src, err := hooks.NewSource(args[0], hooks.Auth(args[1]), key)
			if err != nil {
				return err
			}
			replaced, err := reg.Add(ctx, src, cliWho(c))
			actorOf(c.NC).record(ctx, c.JS, "hook.add", src.Name, hooks.Detail(src, replaced), err)
			if err != nil {
				return err
			}
			verb := "added"
			if replaced {
				verb = "replaced"
			}
			fmt.Fprintf(os.Stderr, "webhook source %s %s: POST /hooks/%s (%s)\n", src.Name, verb, src.Name, src.Auth)
			if src.Secret != "" {
				if set, err := keySet(ctx, c, src.Secret); err != nil {
					fmt.Fprintf(os.Stderr, "warning: cannot tell whether webhook key %s is set: %v\n", src.Secret, err)
				} else if !set {
					fmt.Fprintf(os.Stderr, "warning: webhook key %s is not set: deliveries to %s get 503 until it is; set it with host secrets set --hook %s '\"<value>\"'\n",
						src.Secret, src.Name, src.Secret)
				}
			}
			return nil
		}),
	}
	add.Flags().StringVar(&key, "key", "", "hmac, bearer: the name of the webhook key holding the HMAC key or bearer token")
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the webhook sources added with host hooks add (not those of serve --hook flags)",
		Args:  cobra.NoArgs,
		RunE: withRegistry(func(ctx context.Context, c *client.Client, reg *hooks.Registry, _ []string) error {
			entries, err := reg.List(ctx)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(entries)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SOURCE\tAUTH\tKEY\tADDED\tBY")
			for _, e := range entries {
				k := "-"
				if e.Key != "" {
					k = e.Key
					if set, err := keySet(ctx, c, e.Key); err == nil && !set {
						k += " (missing)"
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Name, e.Auth, k, e.Added.Local().Format(time.DateTime), e.AddedBy)
			}
			return tw.Flush()
		}),
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	rm := &cobra.Command{
		Use:   "rm <source>",
		Short: "Remove a webhook source from every host (its deliveries then get 404)",
		Args:  cobra.ExactArgs(1),
		RunE: withRegistry(func(ctx context.Context, c *client.Client, reg *hooks.Registry, args []string) error {
			err := reg.Remove(ctx, args[0])
			actorOf(c.NC).record(ctx, c.JS, "hook.rm", args[0], "", err)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "webhook source %s removed\n", args[0])
			return nil
		}),
	}
	cmd.AddCommand(add, ls, rm)
	return cmd
}

// keySet reports whether a webhook key is stored, by name: in the webhook key store, or among
// the function secrets, where `host secrets set <key>` puts it until a host moves it.
func keySet(ctx context.Context, c *client.Client, name string) (bool, error) {
	hk, err := secrets.BindHookKeys(ctx, c.JS, nil)
	if err != nil {
		return false, err
	}
	names, err := hk.List(ctx)
	if err != nil {
		return false, err
	}
	if slices.Contains(names, name) {
		return true, nil
	}
	fs, err := secrets.Bind(ctx, c.JS, nil)
	if err != nil {
		return false, err
	}
	names, err = fs.List(ctx)
	return slices.Contains(names, name), err
}
