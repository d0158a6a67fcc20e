package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agenthost/host/internal/check"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/jobs"
)

func invokeCmd(g *globals) *cobra.Command {
	var wait, cancelOnInterrupt bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "invoke <function> [json | - | @file.json]",
		Short: "Queue a run of a function; with --wait, stream its logs and print its result",
		Long:  "Queue a run of a function. The payload is a JSON object: given as the argument, read from stdin with -, or from a file with @file.json; none is {}.",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			payload := []byte("{}")
			if len(args) == 2 {
				var err error
				// Refuse what the host would refuse, before anything is queued.
				if payload, err = readPayload(args[1], cmd.InOrStdin()); err != nil {
					return err
				}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			c, closeConn, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer closeConn()
			name, id := args[0], ids.New()
			if wait {
				stop, err := c.FollowLogs(ctx, name, id, func(l client.LogLine) {
					fmt.Fprintf(os.Stderr, "[%s] %s\n", l.Stream, l.Text)
				})
				if err != nil {
					return err
				}
				defer stop()
			}
			if err := c.Invoke(ctx, name, id, payload); err != nil {
				return err
			}
			if !wait {
				fmt.Println(id)
				return nil
			}
			fmt.Fprintf(os.Stderr, "job %s queued; waiting for it to finish (ctrl-c stops waiting%s)\n", id, interruptSays(cancelOnInterrupt, isTerminal(os.Stdin)))
			// ctrl-C ends the wait, not the process, so the job can be canceled too (onInterrupt);
			// a second one kills as usual.
			waitCtx, stopSignals := signal.NotifyContext(ctx, os.Interrupt)
			defer stopSignals()
			rec, err := c.Jobs.WaitFinal(waitCtx, id)
			if err != nil && waitCtx.Err() != nil && ctx.Err() == nil {
				stopSignals()
				return onInterrupt(cmd.Context(), c, id, cancelOnInterrupt, cmd.InOrStdin(), isTerminal(os.Stdin))
			}
			if err != nil {
				if errors.Is(err, context.DeadlineExceeded) {
					return fmt.Errorf("job %s did not finish within --timeout %s; it goes on: follow it with `host logs -f %s`", id, timeout, id)
				}
				return err
			}
			// Lines published just before the final record may still be in flight.
			time.Sleep(50 * time.Millisecond)
			if rec.Status == jobs.Failed {
				return fmt.Errorf("job %s failed after %d attempt(s): %s", id, rec.Attempts, rec.Error)
			}
			if rec.Status == jobs.Canceled {
				return fmt.Errorf("job %s was canceled: %s", id, rec.Error)
			}
			if rec.Result == nil && rec.ResultBytes > 0 {
				return fmt.Errorf("job %s succeeded, but its %d-byte result is too large for the job record; read it from agent.result.%s", id, rec.ResultBytes, name)
			}
			fmt.Println(string(rec.Result))
			return nil
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the result, streaming the job's log lines to stderr")
	cmd.Flags().DurationVar(&timeout, "timeout", time.Hour, "how long to wait")
	cmd.Flags().BoolVar(&cancelOnInterrupt, "cancel-on-interrupt", false, "ctrl-c of --wait cancels the job too, without asking")
	return cmd
}

func jobsCmd(g *globals) *cobra.Command {
	var fn, flow, status string
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "List recent jobs, newest first",
		Args:  cobra.NoArgs,
		RunE: g.withClient(time.Minute, func(ctx context.Context, c *client.Client, _ []string) error {
			f := jobs.Filter{Function: fn, Flow: flow}
			if status != "" {
				var err error
				if f.Status, err = parseStatus(status); err != nil {
					return err
				}
			}
			recs, err := c.Jobs.Recent(ctx, f, limit)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(recs)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "JOB\tFUNCTION\tSTATUS\tATTEMPTS\tSTARTED\tRUN TIME\tFLOW")
			for _, r := range recs {
				started := "-"
				if !r.Started.IsZero() {
					started = r.Started.Local().Format(time.DateTime)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.ID, r.Function, r.Status, r.Attempts,
					started, r.RunTime().Round(time.Millisecond), r.FlowID)
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().StringVar(&fn, "function", "", "only jobs of this function")
	cmd.Flags().StringVar(&flow, "flow", "", "only jobs of this flow")
	cmd.Flags().StringVar(&status, "status", "", "only jobs in this status: queued, running, succeeded, failed, canceled or retrying")
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many (0: all)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func jobCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "job <id>",
		Short: "Show one job's record as JSON",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(30*time.Second, func(ctx context.Context, c *client.Client, args []string) error {
			rec, err := c.Jobs.Get(ctx, args[0])
			if err != nil {
				return err
			}
			return printJSON(rec)
		}),
	}
}

func logsCmd(g *globals) *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs <job-id>",
		Short: "Print a job's output lines; -f follows until the job ends",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if !client.ValidJobID(id) {
				return fmt.Errorf("%q is not a job id", id)
			}
			ctx := cmd.Context()
			c, closeConn, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer closeConn()
			print := func(l client.LogLine) {
				out := os.Stdout
				if l.Stream == "stderr" {
					out = os.Stderr
				}
				fmt.Fprintln(out, l.Text)
			}
			if !follow {
				lines, err := c.Logs(ctx, id)
				if err != nil {
					return err
				}
				for _, l := range lines {
					print(l)
				}
				return nil
			}
			stop, err := c.FollowLogs(ctx, "", id, print)
			if err != nil {
				return err
			}
			defer stop()
			if _, err := c.Jobs.WaitFinal(ctx, id); err != nil {
				return err
			}
			time.Sleep(100 * time.Millisecond) // let the last lines arrive
			return nil
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing lines until the job ends")
	return cmd
}

func checkCmd() *cobra.Command {
	var allowNetworkHost []string
	cmd := &cobra.Command{
		Use:   "check [dir]",
		Short: "Validate the functions of a directory without running them",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "functions"
			if len(args) == 1 {
				dir = args[0]
			}
			fns, errs := functions.Load(dir)
			total := len(fns) + len(errs)
			// What loads may still fail at once when it runs: the file does not compile, or
			// has no main.
			for _, name := range sortedKeys(fns) {
				if err := check.Function(cmd.Context(), fns[name], check.Options{}); err != nil {
					errs = append(errs, err)
					delete(fns, name)
				}
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			for _, name := range sortedKeys(fns) {
				f := fns[name]
				fmt.Fprintf(tw, "ok\t%s\t%s\tsandbox=%t\t%v\n", name, f.Runtime, f.Spec.Sandbox, f.Subjects())
			}
			tw.Flush()
			// check cannot know the flags serve will get, so a `network: host` function is valid
			// here, with a warning that serve refuses it unless the operator allows it.
			for _, err := range functions.RefuseNetworkHost(maps.Clone(fns), allowNetworkHost) {
				fmt.Fprintln(os.Stderr, "warning:", strings.Replace(err.Error(), ": refused: ", ": ", 1))
			}
			for _, err := range errs {
				fmt.Fprintln(os.Stderr, "refused:", sayOnce(err))
			}
			if len(errs) > 0 {
				return fmt.Errorf("%d of %d function files refused", len(errs), total)
			}
			fmt.Printf("%d functions ok\n", len(fns))
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&allowNetworkHost, "allow-network-host", nil, "the serve flag of the same name: no warning for the network: host functions it names")
	return cmd
}

// sayOnce drops the path a *functions.Error puts before a message that already starts with it
// ("f.py: refused: f.py:2: ..." reads "f.py:2: ...").
func sayOnce(err error) string {
	var fe *functions.Error
	if errors.As(err, &fe) && strings.HasPrefix(fe.Err.Error(), fe.Path) {
		return fe.Err.Error()
	}
	return err.Error()
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

func flowCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "flow <flow-id>",
		Short: "Show every step of a flow: function, job, attempt, status, queue wait, run time, outputs",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(time.Minute, func(ctx context.Context, c *client.Client, args []string) error {
			recs, err := c.Jobs.Recent(ctx, jobs.Filter{Flow: args[0]}, 0)
			if err != nil {
				return err
			}
			if len(recs) == 0 {
				return fmt.Errorf("no jobs recorded for flow %s (job records are kept 7 days)", args[0])
			}
			slices.SortFunc(recs, func(a, b *jobs.Record) int {
				if a.Hop != b.Hop {
					return a.Hop - b.Hop
				}
				return a.Started.Compare(b.Started)
			})
			if asJSON {
				return printJSON(recs)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "HOP\tFUNCTION\tJOB\tATTEMPT\tSTATUS\tQUEUE WAIT\tRUN TIME\tPARENT\tOUTPUTS")
			for _, r := range recs {
				parent := r.ParentJob
				if parent == "" {
					parent = "-"
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", r.Hop, r.Function, r.ID, r.Attempts, r.Status,
					r.QueueWait().Round(time.Microsecond), r.RunTime().Round(time.Microsecond), parent, strings.Join(r.Outputs, ","))
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func deadCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "dead", Short: "Dead letters: the triggers of jobs that failed for good"}
	var fn string
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List dead letters, oldest first",
		Args:  cobra.NoArgs,
		RunE: g.withClient(time.Minute, func(ctx context.Context, c *client.Client, _ []string) error {
			dl, err := c.DeadLetters(ctx, fn)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(dl)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "JOB\tFUNCTION\tTIME\tATTEMPTS\tERROR")
			for _, d := range dl {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", d.JobID, d.Function, d.Time.Local().Format(time.DateTime), d.Attempts, d.Error)
			}
			return tw.Flush()
		}),
	}
	ls.Flags().StringVar(&fn, "function", "", "only this function's")
	ls.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	replay := &cobra.Command{
		Use:   "replay <job-id>",
		Short: "Publish a dead letter's original message again, as a new job",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(time.Minute, func(ctx context.Context, c *client.Client, args []string) error {
			id := ids.New()
			if err := c.Replay(ctx, args[0], id); err != nil {
				return err
			}
			fmt.Println(id)
			return nil
		}),
	}
	rm := &cobra.Command{
		Use:   "rm <job-id>",
		Short: "Delete a job's dead letter",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(time.Minute, func(ctx context.Context, c *client.Client, args []string) error {
			n, err := c.RemoveDeadLetter(ctx, args[0])
			if err != nil {
				return err
			}
			fmt.Printf("removed %d dead letter(s) of job %s\n", n, args[0])
			return nil
		}),
	}
	var purgeFn string
	purge := &cobra.Command{
		Use:   "purge --function <name>",
		Short: "Delete every dead letter of a function",
		Args:  cobra.NoArgs,
		RunE: g.withClient(time.Minute, func(ctx context.Context, c *client.Client, _ []string) error {
			n, err := c.PurgeDeadLetters(ctx, purgeFn)
			if err != nil {
				return err
			}
			fmt.Printf("removed %d dead letter(s) of function %s\n", n, purgeFn)
			return nil
		}),
	}
	purge.Flags().StringVar(&purgeFn, "function", "", "the function whose dead letters to delete (required)")
	purge.MarkFlagRequired("function")
	cmd.AddCommand(ls, replay, rm, purge)
	return cmd
}

// withClient runs a client command with a connection and a deadline, and closes both after.
func (g *globals) withClient(timeout time.Duration, run func(ctx context.Context, c *client.Client, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
		defer cancel()
		c, closeConn, err := g.connect(ctx)
		if err != nil {
			return err
		}
		defer closeConn()
		return run(ctx, c, args)
	}
}
