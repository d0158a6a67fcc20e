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

func secretsCmd(g *globals) *cobra.Command {
	var keyFile string
	cmd := &cobra.Command{Use: "secrets", Short: "Manage secrets: JSON values, encrypted with the host key, resolved only at run time"}
	cmd.PersistentFlags().StringVar(&keyFile, "secrets-key-file", defaultKeyFile(), "the host key that serve uses")
	// withStore runs a subcommand against the secret store; only writing needs the key.
	withStore := func(needKey bool, run func(ctx context.Context, st *secrets.Store, args []string) error) func(*cobra.Command, []string) error {
		return g.withClient(30*time.Second, func(ctx context.Context, c *client.Client, args []string) error {
			var key []byte
			if needKey {
				var err error
				if key, err = secrets.LoadKey(keyFile, false); err != nil {
					return fmt.Errorf("%w (`host serve` creates the key on first start; pass the same --secrets-key-file here)", err)
				}
			}
			st, err := secrets.Bind(ctx, c.JS, key)
			if err != nil {
				return err
			}
			return run(ctx, st, args)
		})
	}
	set := &cobra.Command{
		Use:   "set <name> <json | ->",
		Short: "Store a secret; the value is JSON (a string is '\"...\"'), - reads it from stdin",
		Args:  cobra.ExactArgs(2),
		RunE: withStore(true, func(ctx context.Context, st *secrets.Store, args []string) error {
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
			fmt.Fprintf(os.Stderr, "secret %s stored\n", args[0])
			return nil
		}),
	}
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List secret names (never values)",
		Args:  cobra.NoArgs,
		RunE: withStore(false, func(ctx context.Context, st *secrets.Store, _ []string) error {
			names, err := st.List(ctx)
			if err != nil {
				return err
			}
			for _, n := range names {
				fmt.Println(n)
			}
			return nil
		}),
	}
	rm := &cobra.Command{
		Use:   "rm <name>",
		Short: "Delete a secret",
		Args:  cobra.ExactArgs(1),
		RunE: withStore(false, func(ctx context.Context, st *secrets.Store, args []string) error {
			return st.Delete(ctx, args[0])
		}),
	}
	cmd.AddCommand(set, ls, rm)
	return cmd
}
