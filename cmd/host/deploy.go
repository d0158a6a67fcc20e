package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agenthost/host/internal/audit"
	"github.com/agenthost/host/internal/check"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/deploy"
)

// deployCmds are the commands of deployments: deploy, deployments, diff, rollback, pull.
func deployCmds(g *globals) []*cobra.Command {
	return []*cobra.Command{deployCmd(g), deploymentsCmd(g), diffCmd(g), rollbackCmd(g), pullCmd(g)}
}

// openDeployments connects and opens the deployment store.
func (g *globals) openDeployments(ctx context.Context) (*client.Client, *deploy.Store, func(), error) {
	c, closeNC, err := g.connect(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	st, err := deploy.Open(ctx, c.JS, 0)
	if err != nil {
		closeNC()
		return nil, nil, nil, err
	}
	return c, st, closeNC, nil
}

func deployCmd(g *globals) *cobra.Command {
	var message string
	var allowNetworkHost []string
	cmd := &cobra.Command{
		Use:   "deploy [dir]",
		Short: "Check a functions directory and store it as the next deployment, which every `serve --deployed` host serves",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "functions"
			if len(args) == 1 {
				dir = args[0]
			}
			// Checked before connecting: a refused set never reaches NATS.
			fns, errs, warnings := check.Dir(cmd.Context(), dir, check.Options{}, allowNetworkHost)
			for _, err := range warnings {
				fmt.Fprintln(os.Stderr, "warning:", err)
			}
			if len(errs) > 0 {
				for _, err := range errs {
					fmt.Fprintln(os.Stderr, "refused:", err)
				}
				return fmt.Errorf("%d of %d function files refused: nothing was deployed; fix them (`host check %s`) and deploy again", len(errs), len(fns)+len(errs), dir)
			}
			if len(fns) == 0 {
				return fmt.Errorf("%s holds no functions: nothing was deployed", dir)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
			defer cancel()
			c, st, closeNC, err := g.openDeployments(ctx)
			if err != nil {
				return err
			}
			defer closeNC()
			by := client.CanceledBy()
			d, stored, err := st.Deploy(ctx, deploy.Request{Functions: fns, By: by, Message: message})
			if err != nil {
				return err
			}
			if !stored {
				fmt.Printf("unchanged: deployment %d already holds these %d functions; nothing was stored\n", d.Number, len(d.Functions))
				return nil
			}
			auditDeploy(ctx, c, by, "deploy", d)
			fmt.Printf("deployment %d stored (%d functions): %s\n", d.Number, len(d.Functions), changedText(d.Changed))
			return nil
		},
	}
	cmd.Flags().StringVarP(&message, "message", "m", "", "why: shown by `host deployments`")
	cmd.Flags().StringSliceVar(&allowNetworkHost, "allow-network-host", nil, "as for `host check`: no warning for the network: host functions it names")
	return cmd
}

// auditDeploy records a deploy or rollback in the audit stream; a host that keeps no audit
// stream yet only loses the entry, which is said.
func auditDeploy(ctx context.Context, c *client.Client, by, act string, d *deploy.Deployment) {
	e := audit.Entry{Who: by, Face: "cli", Act: act, Target: strconv.Itoa(d.Number), Detail: strings.TrimSpace(d.Message + " " + changedText(d.Changed))}
	if err := audit.Append(ctx, c.JS, e); err != nil {
		fmt.Fprintln(os.Stderr, "warning: the deployment is stored, but not recorded in the audit stream:", err)
	}
}

func changedText(changed []string) string {
	if len(changed) == 0 {
		return "no function changed"
	}
	return strings.Join(changed, " ")
}

func deploymentsCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "deployments",
		Short: "List the kept deployments: number, when, who, message, functions changed (* is current)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, st, closeNC, err := g.openDeployments(cmd.Context())
			if err != nil {
				return err
			}
			defer closeNC()
			list, err := st.List(cmd.Context())
			if err != nil {
				return err
			}
			cur := 0
			if d, err := st.Current(cmd.Context()); err == nil {
				cur = d.Number
			}
			if asJSON {
				return printJSON(map[string]any{"current": cur, "deployments": list})
			}
			if len(list) == 0 {
				fmt.Println("no deployments yet: `host deploy <dir>` stores the first")
				return nil
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NUMBER\tWHEN\tWHO\tFUNCTIONS\tMESSAGE\tCHANGED")
			for i := len(list) - 1; i >= 0; i-- {
				d := list[i]
				mark := " "
				if d.Number == cur {
					mark = "*"
				}
				fmt.Fprintf(tw, "%s%d\t%s\t%s\t%d\t%s\t%s\n", mark, d.Number, d.At.Local().Format(time.DateTime), d.By, len(d.Functions), dash(d.Message), changedText(d.Changed))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func deploymentNumber(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimPrefix(s, "#"))
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%q is not a deployment number: `host deployments` lists them", s)
	}
	return n, nil
}

func diffCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "diff <a> <b> [function]",
		Short: "Show a unified diff of two deployments' code (sources with their annotations), of all functions or one",
		Args:  cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := deploymentNumber(args[0])
			if err != nil {
				return err
			}
			b, err := deploymentNumber(args[1])
			if err != nil {
				return err
			}
			fn := ""
			if len(args) == 3 {
				fn = args[2]
			}
			_, st, closeNC, err := g.openDeployments(cmd.Context())
			if err != nil {
				return err
			}
			defer closeNC()
			out, err := st.Diff(cmd.Context(), a, b, fn)
			if err != nil {
				return err
			}
			fmt.Print(out)
			return nil
		},
	}
}

func rollbackCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rollback <n>",
		Short: "Store a new deployment equal to deployment n, which the hosts then serve",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := deploymentNumber(args[0])
			if err != nil {
				return err
			}
			c, st, closeNC, err := g.openDeployments(cmd.Context())
			if err != nil {
				return err
			}
			defer closeNC()
			by := client.CanceledBy()
			d, stored, err := st.Rollback(cmd.Context(), n, by)
			if err != nil {
				return err
			}
			if !stored {
				fmt.Printf("unchanged: the current deployment %d already holds deployment %d's code; nothing was stored\n", d.Number, n)
				return nil
			}
			auditDeploy(cmd.Context(), c, by, "rollback", d)
			fmt.Printf("deployment %d stored, equal to %d: %s\n", d.Number, n, changedText(d.Changed))
			return nil
		},
	}
}

func pullCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "pull [dir]",
		Short: "Write the current deployment's functions into a directory (default ./functions), e.g. for git",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "functions"
			if len(args) == 1 {
				dir = args[0]
			}
			_, st, closeNC, err := g.openDeployments(cmd.Context())
			if err != nil {
				return err
			}
			defer closeNC()
			d, err := st.Current(cmd.Context())
			if err != nil {
				return err // ErrNone says to deploy first
			}
			if err := st.Pull(cmd.Context(), d, dir); err != nil {
				return err
			}
			fmt.Printf("deployment %d written to %s (%d functions)\n", d.Number, dir, len(d.Functions))
			return nil
		},
	}
}

// printServedFrom says, under `host functions`' table, which deployments the hosts serve and
// which files they refuse, with the error.
func printServedFrom(fns []*client.Function) {
	deployments := map[int]bool{}
	for _, f := range fns {
		for _, n := range f.Deployments {
			deployments[n] = true
		}
	}
	if len(deployments) > 0 {
		var nums []string
		for _, n := range slices.Sorted(maps.Keys(deployments)) {
			nums = append(nums, strconv.Itoa(n))
		}
		fmt.Printf("\nserving deployment %s\n", strings.Join(nums, ", "))
	}
	for _, f := range fns {
		for _, r := range f.Refused {
			fmt.Printf("refused: %s: %s\n", f.Name, r)
		}
	}
	// Every function a host serves carries its switch error: say it once per host.
	said := map[string]bool{}
	for _, f := range fns {
		for _, e := range f.SwitchErrors {
			if !said[e] {
				said[e] = true
				fmt.Printf("not switched: %s\n", e)
			}
		}
	}
}
