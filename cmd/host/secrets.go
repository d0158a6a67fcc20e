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
	open := func(ctx context.Context, needKey bool) (*secrets.Store, func(), error) {
		c, closeConn, err := g.connect(ctx)
		if err != nil {
			return nil, nil, err
		}
		var key []byte
		if needKey {
			if key, err = secrets.LoadKey(keyFile, false); err != nil {
				closeConn()
				return nil, nil, fmt.Errorf("%w (`host serve` creates the key on first start; pass the same --secrets-key-file here)", err)
			}
		}
		st, err := secrets.Bind(ctx, c.JS, key)
		if err != nil {
			closeConn()
			return nil, nil, err
		}
		return st, closeConn, nil
	}
	set := &cobra.Command{
		Use:   "set <name> <json | ->",
		Short: "Store a secret; the value is JSON (a string is '\"...\"'), - reads it from stdin",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
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
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			st, closeConn, err := open(ctx, true)
			if err != nil {
				return err
			}
			defer closeConn()
			if err := st.Set(ctx, args[0], value); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "secret %s stored\n", args[0])
			return nil
		},
	}
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List secret names (never values)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			st, closeConn, err := open(ctx, false)
			if err != nil {
				return err
			}
			defer closeConn()
			names, err := st.List(ctx)
			if err != nil {
				return err
			}
			for _, n := range names {
				fmt.Println(n)
			}
			return nil
		},
	}
	rm := &cobra.Command{
		Use:   "rm <name>",
		Short: "Delete a secret",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			st, closeConn, err := open(ctx, false)
			if err != nil {
				return err
			}
			defer closeConn()
			return st.Delete(ctx, args[0])
		},
	}
	cmd.AddCommand(set, ls, rm)
	return cmd
}
