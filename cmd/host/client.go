package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/check"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
)

func invokeCmd(g *globals) *cobra.Command {
	var wait, cancelOnInterrupt bool
	var timeout time.Duration
	var key, fnDir string
	cmd := &cobra.Command{
		Use:   "invoke <function> [json | - | @file.json]",
		Short: "Queue a run of a function; with --wait, stream its logs and print its result",
		Long: `Queue a run of a function. The payload is a JSON object: given as the argument, read from stdin with -, or from a file with @file.json; none is {}.

Without --wait it prints the job id. With --wait it streams the job's log lines to stderr as they are written, every one of them, then prints the result on stdout.

A function no host serves yet that the local functions directory (--functions) has, such as one ` + "`host new`" + ` just wrote, is waited for up to 30s while a host loads it, saying so on stderr; one a host would refuse is refused at once with the reason.

With --id the job gets that id, an idempotency key: the same call again runs nothing twice (with --wait it prints the first run's outcome), and the same id with other arguments, or for another function, is refused.

Exit status: 0 the job was queued (with --wait: it succeeded); 1 the job failed, was canceled, or did not finish within --timeout (it goes on); 2 it could not be queued (NATS unreachable, no such function, a payload that is not a JSON object, a wrong argument).`,
		Args: func(cmd *cobra.Command, args []string) error { return couldNotRun(cobra.RangeArgs(1, 2)(cmd, args)) },
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			payload, id, err := invokeInput(args, key, cmd.InOrStdin())
			if err != nil {
				return couldNotRun(err)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			s, err := g.dial(ctx)
			if err != nil {
				return couldNotRun(err)
			}
			defer s.nc.Close()
			c, err := s.client(ctx)
			if deniedJetStream(err) { // a user's NATS login: no job records, only what its role may publish
				return invokeAsCaller(ctx, s, name, id, payload, wait, timeout)
			}
			if err != nil {
				return couldNotRun(err)
			}
			var result *client.ResultWatch
			if wait {
				// Before the job is queued: a result too big for the job record is only published.
				if result, err = c.WatchResult(name, id); err != nil {
					return couldNotRun(err)
				}
				defer result.Stop()
			}
			c.Warn = warnOnStderr
			if err := invokeOrAwait(ctx, c, fnDir, name, id, payload); err != nil {
				return couldNotRun(err)
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
			rec, err := c.FollowJob(waitCtx, name, id, func(l client.LogLine) {
				fmt.Fprintf(os.Stderr, "[%s] %s\n", l.Stream, l.Text)
			})
			asked := id
			rec, id, err = followSuperseded(waitCtx, c, name, id, rec, err)
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
			switch rec.Status {
			case jobtype.Failed:
				return fmt.Errorf("job %s failed after %d attempt(s): %s", id, rec.Attempts, rec.Error)
			case jobtype.Canceled:
				return fmt.Errorf("job %s was canceled: %s", id, rec.Error)
			}
			out := rec.Result
			if out == nil && rec.ResultBytes > 0 && id != asked {
				return fmt.Errorf("job %s succeeded, but its %d-byte result is too large for the job record: read it from agent.result.%s", id, rec.ResultBytes, name)
			}
			if out == nil && rec.ResultBytes > 0 {
				if out, err = result.Result(ctx); err != nil {
					return fmt.Errorf("job %s succeeded, but its %d-byte result (too large for the job record) did not reach this client: %w; read it from agent.result.%s", id, rec.ResultBytes, err, name)
				}
			}
			fmt.Println(string(out))
			return nil
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the result, streaming the job's log lines to stderr")
	cmd.Flags().DurationVar(&timeout, "timeout", time.Hour, "how long to wait")
	cmd.Flags().BoolVar(&cancelOnInterrupt, "cancel-on-interrupt", false, "ctrl-c of --wait cancels the job too, without asking")
	cmd.Flags().StringVar(&fnDir, "functions", "functions", "the local functions directory: a function it has that no host serves yet (just written) is waited for, up to 30s")
	cmd.Flags().StringVar(&key, "id", "", "the job's id, an idempotency key: a repeat of the same call runs nothing twice; other arguments under it are refused")
	return cmd
}

// invokeInput is what `host invoke` queues: the payload (refusing, before anything is
// queued, what the host would refuse) and the job id (--id, or a fresh one).
func invokeInput(args []string, key string, stdin io.Reader) (payload []byte, id string, err error) {
	payload, id = []byte("{}"), ids.New()
	if len(args) == 2 {
		if payload, err = readPayload(args[1], stdin); err != nil {
			return nil, "", err
		}
	}
	if key != "" {
		if !ids.Safe.MatchString(key) {
			return nil, "", fmt.Errorf("--id %q cannot be a job id: use 1 to 64 of A-Z a-z 0-9 _ -", key)
		}
		id = key
	}
	return payload, id, nil
}

// deniedJetStream says err is the server refusing the login the JetStream API.
func deniedJetStream(err error) bool {
	var d *bus.DeniedError
	return errors.As(err, &d) && d.JetStreamAPI()
}

// invokeAsCaller is invoke for a login without the JetStream API (a user's NATS login, the
// callers user), doing what its role lets it: a JetStream publish to agent.run.<fn>, or with
// --wait an agent.call, whose reply is the job's outcome. Log lines are not its to read.
func invokeAsCaller(ctx context.Context, s *session, name, id string, payload []byte, wait bool, timeout time.Duration) error {
	ctx, stop := s.guard(ctx)
	defer stop()
	if !wait {
		if err := client.QueueAsCaller(ctx, s.nc, name, id, payload); err != nil {
			return couldNotRun(s.explain(err))
		}
		fmt.Println(id)
		return nil
	}
	fmt.Fprintf(os.Stderr, "job %s: calling %s as the NATS login %s and waiting for its outcome (its log lines are read with the hosts credentials: host logs %s)\n", id, name, s.login, id)
	out, err := client.CallAsCaller(ctx, s.nc, name, id, payload)
	if d := s.Denied(); d != nil {
		return couldNotRun(d)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("job %s did not answer within --timeout %s; it goes on (its outcome is on agent.result.%s or agent.error.%s)", id, timeout, name, name)
	}
	if err != nil {
		return couldNotRun(err)
	}
	switch out.Status {
	case jobtype.Succeeded:
		fmt.Println(string(out.Result))
		return nil
	case jobtype.Canceled:
		return fmt.Errorf("job %s was canceled: %s", id, out.Error.Error)
	}
	return fmt.Errorf("job %s failed: %s", id, out.Error.Error)
}

func jobsCmd(g *globals) *cobra.Command {
	var fn, flow, delivery, status string
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "List recent jobs, newest first",
		Args:  cobra.NoArgs,
		RunE: g.withClient(time.Minute, func(ctx context.Context, c *client.Client, _ []string) error {
			if delivery != "" {
				// A webhook delivery's id is the flow id of every job it started.
				if flow != "" && flow != delivery {
					return fmt.Errorf("--delivery %s and --flow %s name different flows: a delivery's id is the flow id of what it started", delivery, flow)
				}
				flow = delivery
			}
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
				status := string(r.Status)
				if r.Held != "" {
					status += " (" + r.Held + ")" // what it waits for: its function's flow control
				}
				if r.SupersededBy != "" {
					status += " (by " + r.SupersededBy + ")" // the job that ran in its place (debounce:)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.ID, r.Function, status, r.Attempts,
					started, r.RunTime().Round(time.Millisecond), r.FlowID)
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().StringVar(&fn, "function", "", "only jobs of this function")
	cmd.Flags().StringVar(&flow, "flow", "", "only jobs of this flow")
	cmd.Flags().StringVar(&delivery, "delivery", "", "only jobs a webhook delivery started (the id its 202 answered with; it is their flow id)")
	cmd.Flags().StringVar(&status, "status", "", "only jobs in this status: queued, running, succeeded, failed, canceled or retrying")
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many (0: all)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func jobCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
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
	// The record is JSON already; the flag is accepted so that every listing and record
	// command takes --json alike.
	cmd.Flags().Bool("json", true, "print JSON (always)")
	return cmd
}

func logsCmd(g *globals) *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs <job-id>",
		Short: "Print a job's output lines; -f follows until the job ends",
		Long: `Print a job's output lines: stdout lines on stdout, stderr lines on stderr. With -f, follow the job: a job still queued is waited for, and the command ends at the job's end, after its last line.

An id with no job record, no log line and no queued trigger is an error (exit status 1); job records are kept 7 days and logs 24 hours by default.`,
		Args: cobra.ExactArgs(1),
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
			state, err := c.LookupJob(ctx, id)
			if err != nil {
				return err
			}
			switch {
			case state == client.JobUnknown:
				return fmt.Errorf("no such job %s: it has no record, no log line and no queued trigger (records are kept 7 days, logs 24 hours); list jobs with `host jobs`", id)
			case state == client.JobQueued && follow:
				fmt.Fprintf(os.Stderr, "job %s is queued and has not started; waiting for it (ctrl-c stops waiting, not the job)\n", id)
			case state == client.JobQueued:
				fmt.Fprintf(os.Stderr, "job %s is queued and has not started yet, so it has no log; follow it with `host logs -f %s`\n", id, id)
				return nil
			}
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
			_, err = c.FollowJob(ctx, "", id, print)
			return err
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing lines until the job ends")
	return cmd
}

func checkCmd() *cobra.Command {
	var allowNetworkHost []string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "check [dir]",
		Short: "Validate the functions of a directory without running them",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "functions"
			if len(args) == 1 {
				dir = args[0]
			}
			fns, errs, warnings := check.Dir(cmd.Context(), dir, check.Options{}, allowNetworkHost)
			total := len(fns) + len(errs)
			var failed error
			if len(errs) > 0 {
				failed = fmt.Errorf("%d of %d function files refused", len(errs), total)
			}
			if asJSON {
				if err := printJSON(checkReport(fns, errs, warnings)); err != nil {
					return err
				}
				return failed
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			for _, name := range sortedKeys(fns) {
				f := fns[name]
				fmt.Fprintf(tw, "ok\t%s\t%s\tsandbox=%t\t%v\n", name, f.Runtime, f.Spec.Sandbox, f.Subjects())
			}
			tw.Flush()
			for _, err := range warnings {
				fmt.Fprintln(os.Stderr, "warning:", err)
			}
			for _, err := range errs {
				fmt.Fprintln(os.Stderr, "refused:", err)
			}
			if failed != nil {
				return failed
			}
			fmt.Printf("%d functions ok\n", len(fns))
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&allowNetworkHost, "allow-network-host", nil, "the serve flag of the same name: no warning for the network: host functions it names")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON: the functions that are ok, the refusals and the warnings (exit status as without)")
	return cmd
}

// checked is `host check --json`'s output.
type checked struct {
	OK       []checkedFunction `json:"ok"`
	Refused  []string          `json:"refused"`
	Warnings []string          `json:"warnings"`
}

type checkedFunction struct {
	Name     string   `json:"name"`
	File     string   `json:"file"`
	Runtime  string   `json:"runtime"`
	Sandbox  bool     `json:"sandbox"`
	Subjects []string `json:"subjects"`
}

func checkReport(fns map[string]*functions.Function, errs, warnings []error) checked {
	r := checked{OK: []checkedFunction{}, Refused: []string{}, Warnings: []string{}}
	for _, name := range sortedKeys(fns) {
		f := fns[name]
		r.OK = append(r.OK, checkedFunction{Name: name, File: f.Root, Runtime: string(f.Runtime), Sandbox: f.Spec.Sandbox, Subjects: f.Subjects()})
	}
	for _, err := range errs {
		r.Refused = append(r.Refused, err.Error())
	}
	for _, err := range warnings {
		r.Warnings = append(r.Warnings, err.Error())
	}
	return r
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
			fmt.Fprintln(tw, "JOB\tFUNCTION\tTIME\tATTEMPTS\tREPLAYED AS\tERROR")
			for _, d := range dl {
				replays := "-"
				if len(d.ReplayedAs) > 0 {
					replays = strings.Join(d.ReplayedAs, ",")
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", d.JobID, d.Function, d.Time.Local().Format(time.DateTime), d.Attempts, replays, d.Error)
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
			a := actorOf(c.NC)
			c.Warn = warnOnStderr
			err := c.ReplayAs(ctx, args[0], id, a.start())
			a.record(ctx, c.JS, "dead.replay", args[0], "as job "+id, err)
			if err != nil {
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
		s, err := g.dial(ctx)
		if err != nil {
			return err
		}
		defer s.nc.Close()
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		ctx, stop := s.guard(ctx)
		defer stop()
		return s.explain(run(ctx, c, args))
	}
}

// followSuperseded follows a job superseded by a newer message of its debounce: key to the job
// that ran in its place (which may have been superseded in turn), saying so on stderr, so that
// `host invoke --wait` answers with the run's outcome. It returns the last record and its id.
func followSuperseded(ctx context.Context, c *client.Client, name, id string, rec *jobs.Record, err error) (*jobs.Record, string, error) {
	for hops := 0; err == nil && rec.Status == jobtype.Superseded && rec.SupersededBy != "" && hops < 100; hops++ {
		fmt.Fprintf(os.Stderr, "job %s was superseded by job %s (debounce:: a newer message of its key runs in its place with its arguments); waiting for that one\n", id, rec.SupersededBy)
		id = rec.SupersededBy
		rec, err = c.FollowJob(ctx, name, id, func(l client.LogLine) { fmt.Fprintf(os.Stderr, "[%s] %s\n", l.Stream, l.Text) })
	}
	return rec, id, err
}
