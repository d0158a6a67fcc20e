package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/secrets"
)

// defaultKeyFile keeps the secrets key in the user's config directory, never beside the data.
func defaultKeyFile() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "secrets.key"
	}
	return filepath.Join(dir, "host", "secrets.key")
}

// keyStore is what the secrets subcommands do with either store: the function secrets, or
// (with --hook) the webhook keys kept apart from them.
type keyStore interface {
	Set(ctx context.Context, name string, value json.RawMessage) error
	List(ctx context.Context) ([]string, error)
	Delete(ctx context.Context, name string) error
}

func secretsCmd(g *globals) *cobra.Command {
	var keyFile string
	var hook bool
	cmd := &cobra.Command{Use: "secrets", Short: "Manage secrets: JSON values, encrypted with the host key, resolved only at run time"}
	cmd.PersistentFlags().StringVar(&keyFile, "secrets-key-file", defaultKeyFile(), "the host key that serve uses")
	cmd.PersistentFlags().BoolVar(&hook, "hook", false,
		"act on the webhook keys (named by serve --hook <source>=hmac:<key>), which are kept apart from function secrets and never given to a function")
	// withStore runs a subcommand against the secret store, or the webhook key store with
	// --hook; only writing needs the key.
	withStore := func(needKey bool, run func(ctx context.Context, st keyStore, args []string) error) func(*cobra.Command, []string) error {
		return g.withClient(30*time.Second, func(ctx context.Context, c *client.Client, args []string) error {
			var key []byte
			if needKey {
				var err error
				if key, err = secrets.LoadKey(keyFile, false); err != nil {
					return fmt.Errorf("%w (`host serve` creates the key on first start; pass the same --secrets-key-file here)", err)
				}
			}
			if hook {
				st, err := secrets.BindHookKeys(ctx, c.JS, key)
				if err != nil {
					return err
				}
				return run(ctx, st, args)
			}
			st, err := secrets.Bind(ctx, c.JS, key)
			if err != nil {
				return err
			}
			return run(ctx, st, args)
		})
	}
	what := func() string {
		if hook {
			return "webhook key"
		}
		return "secret"
	}
	set := &cobra.Command{
		Use:   "set [--hook] <name> <json | ->",
		Short: "Store a secret (with --hook, a webhook key); the value is JSON (a string is '\"...\"'), - reads it from stdin",
		Long: "Store a secret (with --hook, a webhook key); the value is JSON (a string is '\"...\"'), - reads it from stdin.\n\n" +
			"Strings and numbers shorter than 4 characters (alone or inside an object) are refused: they cannot be redacted from\n" +
			"job output without destroying ordinary text. A function receives a secret only if its annotations declare it\n" +
			"(env: NAME=$secret:<name>, or secrets: <name>). Webhook keys (--hook) are never given to functions.",
		Args: cobra.ExactArgs(2),
		RunE: withStore(true, func(ctx context.Context, st keyStore, args []string) error {
			value := []byte(args[1])
			if args[1] == "-" {
				var err error
				if value, err = io.ReadAll(io.LimitReader(os.Stdin, 1<<20)); err != nil {
					return err
				}
			}
			if !json.Valid(value) {
				return fmt.Errorf("the value of %s is not JSON; quote a string: host secrets set %s '\"value\"'", args[0], args[0])
			}
			if err := st.Set(ctx, args[0], value); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "%s %s stored\n", what(), args[0])
			return nil
		}),
	}
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls [--hook]",
		Short: "List secret names, or with --hook webhook key names (never values)",
		Args:  cobra.NoArgs,
		RunE: withStore(false, func(ctx context.Context, st keyStore, _ []string) error {
			names, err := st.List(ctx)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(append([]string{}, names...)) // [] rather than null when empty
			}
			for _, n := range names {
				fmt.Println(n)
			}
			return nil
		}),
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "print the names as a JSON array")
	rm := &cobra.Command{
		Use:   "rm [--hook] <name>",
		Short: "Delete a secret, or with --hook a webhook key",
		Args:  cobra.ExactArgs(1),
		RunE: withStore(false, func(ctx context.Context, st keyStore, args []string) error {
			return st.Delete(ctx, args[0])
		}),
	}
	cmd.AddCommand(set, ls, rm)
	return cmd
}
