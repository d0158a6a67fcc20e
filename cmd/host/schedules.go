package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agenthost/host/internal/client"
)

func schedulesCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "schedules",
		Short: "List the schedules: function, schedule, next and last tick, paused; pause and resume them",
		Long: `List the schedule: functions the hosts serve, with their next tick (none while paused), the last tick the hosts published, and whether they are paused.

A paused schedule skips its ticks on every host, across restarts, until it is resumed; a resumed one fires on its next tick, never the ticks it skipped. Triggers sent to the function otherwise (agent.run, agent.call, on: subjects) still run.`,
		Args: cobra.NoArgs,
		RunE: g.withClient(time.Minute, func(ctx context.Context, c *client.Client, _ []string) error {
			entries, err := c.Schedules(ctx)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(entries)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "FUNCTION\tSCHEDULE\tNEXT\tLAST TICK\tPAUSED")
			for _, e := range entries {
				paused, next := "no", when(e.Next)
				if e.Paused {
					paused = fmt.Sprintf("yes, by %s at %s", e.PausedBy, e.PausedAt.Local().Format(time.DateTime))
					next = "- (paused)" // it fires only once resumed
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Function, e.Schedule, next, when(e.LastTick), paused)
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	pause := &cobra.Command{
		Use:   "pause <function>",
		Short: "Skip a function's scheduled ticks on every host until it is resumed",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(30*time.Second, func(ctx context.Context, c *client.Client, args []string) error {
			if err := c.PauseSchedule(ctx, args[0], ""); err != nil {
				return err
			}
			fmt.Printf("schedule of %s paused; `host schedules resume %s` resumes it\n", args[0], args[0])
			return nil
		}),
	}
	resume := &cobra.Command{
		Use:   "resume <function>",
		Short: "Let a paused schedule fire again from its next tick",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(30*time.Second, func(ctx context.Context, c *client.Client, args []string) error {
			was, err := c.ResumeSchedule(ctx, args[0])
			if err != nil {
				return err
			}
			if !was {
				fmt.Printf("schedule of %s was not paused\n", args[0])
				return nil
			}
			fmt.Printf("schedule of %s resumed\n", args[0])
			return nil
		}),
	}
	cmd.AddCommand(pause, resume)
	cmd.AddCommand(namedScheduleCmds(g)...)
	return cmd
}

func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.DateTime)
}
