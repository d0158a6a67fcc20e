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

// namedScheduleCmds are `host schedules add|rm|pause-named|resume-named`: named schedules
// (schedule.Named), checked and stored by the same client calls as the dashboard's form.
func namedScheduleCmds(g *globals) []*cobra.Command {
	var args string
	var edit bool
	add := &cobra.Command{
		Use:   "add <name> <function> <schedule> [--args JSON] [--edit]",
		Short: "Add a named schedule that sends --args to a function on every tick, on every host (--edit changes one)",
		Args:  cobra.ExactArgs(3),
		RunE: g.withClient(30*time.Second, func(ctx context.Context, c *client.Client, a []string) error {
			ns := client.NamedSchedule{Name: a[0], Function: a[1], Schedule: a[2], Args: args}
			n, _, err := c.AddNamedSchedule(ctx, ns, edit, actorOf(c.NC).name)
			actorOf(c.NC).record(ctx, c.JS, "schedule.add", a[0], fmt.Sprintf("%s %q args %s", n.Function, n.Schedule, n.Args), err)
			if err != nil {
				return err
			}
			fmt.Printf("schedule %s saved: %s runs %s with %s\n", n.Name, n.Schedule, n.Function, n.Args)
			return nil
		}),
	}
	add.Flags().StringVar(&args, "args", "{}", "the JSON object each tick sends as the job's arguments")
	add.Flags().BoolVar(&edit, "edit", false, "change the schedule of that name instead of refusing a taken name")
	rm := &cobra.Command{
		Use:   "rm <name>",
		Short: "Remove a named schedule from every host",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(30*time.Second, func(ctx context.Context, c *client.Client, a []string) error {
			err := c.RemoveNamedSchedule(ctx, a[0])
			actorOf(c.NC).record(ctx, c.JS, "schedule.rm", a[0], "", err)
			if err != nil {
				return err
			}
			fmt.Printf("schedule %s removed\n", a[0])
			return nil
		}),
	}
	pause := func(use, act string, p bool) *cobra.Command {
		return &cobra.Command{
			Use:   use + " <name>",
			Short: act + " a named schedule on every host",
			Args:  cobra.ExactArgs(1),
			RunE: g.withClient(30*time.Second, func(ctx context.Context, c *client.Client, a []string) error {
				changed, err := c.PauseNamedSchedule(ctx, a[0], p, actorOf(c.NC).name)
				actorOf(c.NC).record(ctx, c.JS, "schedule."+map[bool]string{true: "pause", false: "resume"}[p], a[0], "", err)
				if err != nil {
					return err
				}
				fmt.Printf("schedule %s: %s (changed: %v)\n", a[0], use, changed)
				return nil
			}),
		}
	}
	var asJSON bool
	ls := &cobra.Command{
		Use:   "named",
		Short: "List the named schedules: name, function, schedule, arguments, next tick (none when paused), last tick",
		Args:  cobra.NoArgs,
		RunE: g.withClient(30*time.Second, func(ctx context.Context, c *client.Client, _ []string) error {
			list, err := c.NamedSchedules(ctx)
			if err != nil || asJSON {
				if err == nil {
					err = printJSON(list)
				}
				return err
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tFUNCTION\tSCHEDULE\tARGS\tNEXT\tLAST TICK\tPAUSED")
			for _, n := range list {
				paused := "no"
				if n.Paused {
					paused = fmt.Sprintf("yes, by %s at %s", n.PausedBy, n.PausedAt.Local().Format(time.DateTime))
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, n.Function, n.Schedule, n.Args, when(n.Next), when(n.LastTick), paused)
			}
			return tw.Flush()
		}),
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return []*cobra.Command{add, rm, ls, pause("pause-named", "Pause", true), pause("resume-named", "Resume", false)}
}
