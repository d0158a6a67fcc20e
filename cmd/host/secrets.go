package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/user"
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
	Delete(ctx context.Context, name string) error
}

// lister is a store read here: names need no key and no host.
type lister interface {
	List(ctx context.Context) ([]string, error)
}

// viaHost sets and removes through a host (agent.admin.secrets.*), which seals with its own
// key: the operator's machine needs no key file, and a value sealed with a key no host holds
// cannot be stored.
type viaHost struct {
	c    *client.Client
	hook bool
	who  string // the audit entry's: the NATS login's user, or the operator's name
	// replaced says the last Set overwrote a stored value.
	replaced bool
}

func (v *viaHost) Set(ctx context.Context, name string, value json.RawMessage) error {
	var err error
	v.replaced, err = v.c.SetSecretAs(ctx, name, value, v.hook, v.who, "cli")
	return err
}

func (v *viaHost) Delete(ctx context.Context, name string) error {
	return v.c.RemoveSecretAs(ctx, name, v.hook, v.who, "cli")
}

// audited is a store the CLI writes itself (--local), recording each write in the audit stream
// as a host does for what it writes.
type audited struct {
	keyStore
	c    *client.Client
	hook bool
}

func (a *audited) Set(ctx context.Context, name string, value json.RawMessage) error {
	err := a.keyStore.Set(ctx, name, value)
	actorOf(a.c.NC).record(ctx, a.c.JS, "secret.set", name, a.detail(), err)
	return err
}

func (a *audited) Delete(ctx context.Context, name string) error {
	err := a.keyStore.Delete(ctx, name)
	actorOf(a.c.NC).record(ctx, a.c.JS, "secret.rm", name, a.detail(), err)
	return err
}

func (a *audited) detail() string {
	if a.hook {
		return "webhook key; --local"
	}
	return "--local"
}

// cliWho names the CLI's user for the host's log: what it can say of itself (the local user and
// machine, the NATS user it connects as, when it is named), which is its word, not a proof.
func cliWho(c *client.Client) string {
	who := "cli"
	if u, err := user.Current(); err == nil {
		who += " " + u.Username
	}
	if h, err := os.Hostname(); err == nil {
		who += "@" + h
	}
	if c.NC.Opts.User != "" {
		who += ", NATS user " + c.NC.Opts.User
	}
	return who + ", connection " + c.NC.Opts.Name
}

func secretsCmd(g *globals) *cobra.Command {
	var keyFile string
	var hook, local bool
	cmd := &cobra.Command{Use: "secrets", Short: "Manage secrets: JSON values, encrypted with the hosts' key, resolved only at run time",
		Long: "Manage secrets: JSON values, encrypted with the hosts' key, resolved only at run time.\n\n" +
			"set and rm go through a running host (NATS request agent.admin.secrets.set / .rm), which seals the value\n" +
			"with its own key: no key file is needed here. --local seals here with --secrets-key-file instead, and is\n" +
			"refused unless that file holds the hosts' key."}
	cmd.PersistentFlags().StringVar(&keyFile, "secrets-key-file", defaultKeyFile(), "with --local: the host key that serve uses")
	cmd.PersistentFlags().BoolVar(&local, "local", false, "set or remove with the key file here, not through a host (refused if it is not the hosts' key)")
	cmd.PersistentFlags().BoolVar(&hook, "hook", false,
		"act on the webhook keys (named by serve --hook <source>=hmac:<key> or host hooks add --key), which are kept apart from function secrets and never given to a function")
	// withStore runs a subcommand against the secret store, or the webhook key store with
	// --hook: through a host unless --local; only writing locally needs the key.
	withStore := func(write, needKey bool, run func(ctx context.Context, st keyStore, args []string) error) func(*cobra.Command, []string) error {
		return g.withClient(30*time.Second, func(ctx context.Context, c *client.Client, args []string) error {
			if write && !local {
				return run(ctx, &viaHost{c: c, hook: hook, who: actorOf(c.NC).name}, args)
			}
			var key []byte
			if needKey {
				var err error
				if key, err = secrets.LoadKey(keyFile, false); err != nil {
					return fmt.Errorf("%w (--local needs the hosts' key file; without --local the host seals the value and no key file is needed)", err)
				}
			}
			var st keyStore
			var err error
			if hook {
				st, err = secrets.BindHookKeys(ctx, c.JS, key)
			} else {
				st, err = secrets.Bind(ctx, c.JS, key)
			}
			if err != nil {
				return err
			}
			if write {
				// Written here, not by a host: the CLI records the act itself.
				st = &audited{keyStore: st, c: c, hook: hook}
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
	cmd.AddCommand(secretsSetCmd(withStore, what), secretsLsCmd(withStore), secretsRmCmd(withStore, what))
	return cmd
}

// secretsStore is secretsCmd's withStore: it makes a subcommand's RunE against the secret store,
// or the webhook key store with --hook.
type secretsStore func(write, needKey bool, run func(ctx context.Context, st keyStore, args []string) error) func(*cobra.Command, []string) error

func secretsSetCmd(withStore secretsStore, what func() string) *cobra.Command {
	set := &cobra.Command{
		Use:   "set [--hook] [--local] <name> <json | ->",
		Short: "Store a secret (with --hook, a webhook key) through a host; the value is JSON (a string is '\"...\"'), - reads it from stdin",
		Long: "Store a secret (with --hook, a webhook key) through a host; the value is JSON (a string is '\"...\"'), - reads it from stdin.\n\n" +
			"Setting a name that is stored already rotates it: jobs that start from then on get the new value.\n" +
			"Strings and numbers shorter than 4 characters (alone or inside an object) are refused: they cannot be redacted from\n" +
			"job output without destroying ordinary text. A function receives a secret only if its annotations declare it\n" +
			"(env: NAME=$secret:<name>, or secrets: <name>). Webhook keys (--hook) are never given to functions.",
		Args: cobra.ExactArgs(2),
		RunE: withStore(true, true, func(ctx context.Context, st keyStore, args []string) error {
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
			if v, ok := st.(*viaHost); ok && v.replaced {
				fmt.Fprintf(os.Stderr, "%s %s rotated: the new value replaced the stored one\n", what(), args[0])
				return nil
			}
			fmt.Fprintf(os.Stderr, "%s %s stored\n", what(), args[0])
			return nil
		}),
	}
	return set
}

func secretsLsCmd(withStore secretsStore) *cobra.Command {
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls [--hook]",
		Short: "List secret names, or with --hook webhook key names (never values)",
		Args:  cobra.NoArgs,
		RunE: withStore(false, false, func(ctx context.Context, st keyStore, _ []string) error {
			names, err := st.(lister).List(ctx)
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
	return ls
}

func secretsRmCmd(withStore secretsStore, what func() string) *cobra.Command {
	rm := &cobra.Command{
		Use:   "rm [--hook] [--local] <name>",
		Short: "Delete a secret, or with --hook a webhook key, through a host",
		Args:  cobra.ExactArgs(1),
		RunE: withStore(true, false, func(ctx context.Context, st keyStore, args []string) error {
			if err := st.Delete(ctx, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "%s %s removed\n", what(), args[0])
			return nil
		}),
	}
	return rm
}
