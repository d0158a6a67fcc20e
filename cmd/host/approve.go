package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/people"
	"github.com/agenthost/host/internal/review"
)

func approveCmd(g *globals) *cobra.Command {
	var reject bool
	var comment string
	cmd := &cobra.Command{
		Use:   "approve <job-id>",
		Short: "Decide a step that waits for approval: its next steps start with the decision, or (--reject) the flow fails there",
		Long: `Decide a step that waits for approval: approved, its next steps start with the decision in their arguments; rejected (--reject), the step fails and its flow stops there.

On the hosts' NATS credentials the decision is the operator's, recorded as the local user and machine (root@vm). On a user's own NATS login (host users add <name> --nats) it is that user's, and the hosts hold it to the user's role and groups as the user store says: the user must be an approver, in one of the groups the step's approve: line names, and not the person who started the flow.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 3*time.Minute)
			defer cancel()
			nc, err := g.connectNATS(ctx)
			if err != nil {
				return err
			}
			defer nc.Close()
			fmt.Fprintln(os.Stderr, decidingSays(args[0], reject))
			var rec *jobs.Record
			if a := actorOf(nc); a.login {
				// A user's login reads no job records: the host answers with the settled one.
				rec, err = client.DecideAsUser(ctx, nc, a.name, args[0], !reject, comment)
			} else {
				var c *client.Client
				if c, err = client.New(ctx, nc); err != nil {
					return err
				}
				rec, err = c.Decide(ctx, args[0], !reject, people.Operator(a.name, "cli"), comment)
			}
			if err != nil {
				return err
			}
			fmt.Println(decisionSaid(rec))
			return nil
		},
	}
	cmd.Flags().BoolVar(&reject, "reject", false, "reject: the step fails, and its flow with it")
	cmd.Flags().StringVar(&comment, "comment", "", "what to say with the decision (the next steps get it)")
	return cmd
}

// decidingSays is what approve says while the host decides: what the decision will do.
func decidingSays(id string, reject bool) string {
	if reject {
		return fmt.Sprintf("rejecting job %s: the host that serves its function fails it, and its flow stops there…", id)
	}
	return fmt.Sprintf("approving job %s: the host that serves its function starts its next steps…", id)
}

func decisionSaid(rec *jobs.Record) string {
	a := rec.Approval
	if a.Decision == jobs.Approved {
		return fmt.Sprintf("job %s approved by %s: its next steps are started (%d outputs)", rec.ID, a.By, len(rec.Outputs))
	}
	return fmt.Sprintf("job %s rejected by %s: it failed, and its flow stops there", rec.ID, a.By)
}

func approvalsCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "approvals",
		Short: "List the steps that wait for a decision (host approve <job-id> decides one)",
		Args:  cobra.NoArgs,
		RunE: g.withClient(time.Minute, func(ctx context.Context, c *client.Client, _ []string) error {
			recs, err := c.Approvals(ctx)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(recs)
			}
			if len(recs) == 0 {
				fmt.Println("no step waits for a decision")
				return nil
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "JOB\tFUNCTION\tFLOW\tSINCE\tEXPIRES\tRESULT")
			for _, r := range recs {
				expires := "-"
				if r.Approval != nil {
					expires = r.Approval.Expires.Local().Format(time.DateTime)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Function, r.FlowID, r.Finished.Local().Format(time.DateTime), expires, abbreviateResult(r.Result))
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(approvalsShowCmd(g))
	return cmd
}

func approvalsShowCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show <job-id>",
		Short: "Show a step's approval: who may decide it, until when, and the diff of each volume it staged",
		Long: `Show a step's approval as a person decides it: who may decide and until when, and, for a step with approve: ... stage, per volume it changed, the files added, removed and changed against the version it read: a unified diff for text files, sizes and hashes for binary ones and for files over 1 MiB. The diff text stops at 256 KiB and the list at 500 paths, and says so.

A host answers (on agent.admin.approvals.show) from the volume store it is configured with, so this needs the hosts' NATS credentials, as reading jobs and volumes does.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
			defer cancel()
			nc, err := g.connectNATS(ctx)
			if err != nil {
				return err
			}
			defer nc.Close()
			v, err := review.Ask(ctx, nc, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(v)
			}
			return v.WriteText(os.Stdout)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func abbreviateResult(b []byte) string {
	if len(b) > 60 {
		return string(b[:60]) + "…"
	}
	return string(b)
}
