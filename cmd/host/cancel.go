package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/jobtype"
)

func cancelCmd(g *globals) *cobra.Command {
	var flow string
	cmd := &cobra.Command{
		Use:   "cancel <job-id> | --flow <flow-id>",
		Short: "Stop a job, or every job of a flow: a running one is killed, a waiting one never runs; each ends canceled, not retried",
		Args: func(cmd *cobra.Command, args []string) error {
			if flow != "" {
				return cobra.NoArgs(cmd, args)
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		RunE: g.withClient(time.Minute, func(ctx context.Context, c *client.Client, args []string) error {
			a := actorOf(c.NC)
			if flow != "" {
				err := cancelFlow(ctx, c, flow, a.name)
				a.record(ctx, c.JS, "flow.cancel", flow, "", err)
				return err
			}
			rec, err := c.CancelAs(ctx, args[0], a.name)
			a.record(ctx, c.JS, "job.cancel", args[0], "", err)
			if err != nil {
				return err
			}
			fmt.Println(cancelSaid(rec))
			return nil
		}),
	}
	cmd.Flags().StringVar(&flow, "flow", "", "cancel every job of this flow, and every step of it yet to start, on any host")
	return cmd
}

func cancelFlow(ctx context.Context, c *client.Client, flow, by string) error {
	fmt.Fprintf(os.Stderr, "canceling flow %s: marking it, then asking the hosts running its jobs to stop them…\n", flow)
	done, err := c.CancelFlow(ctx, flow, by)
	if err != nil {
		return err
	}
	for _, rec := range done.Canceled {
		fmt.Println(cancelSaid(rec))
	}
	fmt.Printf("flow %s canceled: %d jobs canceled; no step of it starts from now on\n", flow, len(done.Canceled))
	if len(done.Failed) > 0 {
		for id, why := range done.Failed {
			fmt.Fprintf(os.Stderr, "job %s: %s\n", id, why)
		}
		return fmt.Errorf("%d jobs of flow %s could not be canceled now (listed above); each is canceled when it comes to run", len(done.Failed), flow)
	}
	return nil
}

// cancelSaid is what a cancel did, for people.
func cancelSaid(c *client.Canceled) string {
	switch {
	case c.StoppedBy != "":
		return fmt.Sprintf("job %s canceled: it was running on %s, and its processes were killed", c.ID, c.StoppedBy)
	case c.Was == jobtype.Running:
		return fmt.Sprintf("job %s canceled: its record said running on %s, which no longer answers; its next delivery will be dropped", c.ID, c.Host)
	case c.Was == jobtype.Retrying:
		return fmt.Sprintf("job %s canceled: it was waiting to retry after attempt %d and will not run again", c.ID, c.Attempts)
	}
	return fmt.Sprintf("job %s canceled: it was waiting and will not run", c.ID)
}

// jobStatuses are what `host jobs --status` takes.
var jobStatuses = []jobtype.Status{jobtype.Queued, jobtype.Running, jobtype.Waiting, jobtype.Succeeded, jobtype.Failed, jobtype.Canceled, jobtype.Retrying, jobtype.Superseded}

// parseStatus checks a --status value.
func parseStatus(s string) (jobtype.Status, error) {
	for _, st := range jobStatuses {
		if string(st) == s {
			return st, nil
		}
	}
	names := make([]string, len(jobStatuses))
	for i, st := range jobStatuses {
		names[i] = string(st)
	}
	return "", fmt.Errorf("--status %q: want one of %s", s, strings.Join(names, ", "))
}

func functionsCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "functions",
		Short: "List the functions the hosts serve: runtime, warm jails, queued and running jobs, last run, success rate",
		Args:  cobra.NoArgs,
		RunE: g.withClient(time.Minute, func(ctx context.Context, c *client.Client, _ []string) error {
			fns, err := c.Functions(ctx)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(fns)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tRUNTIME\tWARM\tQUEUED\tRUNNING\tLAST RUN\tSUCCESS\tHOSTS")
			for _, f := range fns {
				last, rate := "-", "-"
				if !f.LastRun.IsZero() {
					last = f.LastRun.Local().Format(time.DateTime)
				}
				if f.SuccessRate != nil {
					rate = fmt.Sprintf("%.0f%% of %d", *f.SuccessRate*100, f.Succeeded+f.Failed)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", f.Name, f.Runtime, dash(f.Warm), f.Queued, f.Running, last, rate, strings.Join(f.Hosts, ","))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			printServedFrom(fns)
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// interruptSays is what the waiting line says a ctrl-C will do to the job.
func interruptSays(cancelFlag, tty bool) string {
	switch {
	case cancelFlag:
		return " and cancels the job"
	case tty:
		return "; it asks whether to cancel the job too"
	}
	return ", not the job"
}

// onInterrupt decides what a ctrl-C of `invoke --wait` does to the job it waits for: cancel it
// with --cancel-on-interrupt, ask on a terminal, and otherwise leave it running and say so.
// The wait itself ends either way.
func onInterrupt(ctx context.Context, c *client.Client, id string, cancelFlag bool, in io.Reader, tty bool) error {
	if !cancelFlag && tty {
		fmt.Fprintf(os.Stderr, "\ncancel job %s too? [y/N] ", id)
		answer, _ := bufio.NewReader(in).ReadString('\n')
		cancelFlag = strings.EqualFold(strings.TrimSpace(answer), "y") || strings.EqualFold(strings.TrimSpace(answer), "yes")
	}
	if !cancelFlag {
		return fmt.Errorf("stopped waiting; job %s goes on: follow it with `host logs -f %s`, stop it with `host cancel %s`", id, id, id)
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	rec, err := c.Cancel(cctx, id)
	if errors.Is(err, client.ErrFinished) {
		return fmt.Errorf("stopped waiting; %w", err)
	}
	if err != nil {
		return fmt.Errorf("stopped waiting, but the job goes on: %w", err)
	}
	return errors.New("stopped waiting; " + cancelSaid(rec))
}
