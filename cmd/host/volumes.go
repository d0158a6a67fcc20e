package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/objstore"
)

// s3Flags choose the S3 store for volumes; unset, volumes live in the JetStream Object Store.
type s3Flags struct {
	cfg    objstore.S3Config
	secure bool
}

func (f *s3Flags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.cfg.Endpoint, "s3-endpoint", "", "S3 endpoint host:port for volumes (default: $AWS_ENDPOINT_URL; unset: the JetStream Object Store)")
	fl.StringVar(&f.cfg.Bucket, "s3-bucket", "", "S3 bucket for volumes (created if missing)")
	fl.StringVar(&f.cfg.AccessKey, "s3-access-key", "", "S3 access key (default: $AWS_ACCESS_KEY_ID)")
	fl.StringVar(&f.cfg.SecretKey, "s3-secret-key", "", "S3 secret key (default: $AWS_SECRET_ACCESS_KEY)")
	fl.StringVar(&f.cfg.Region, "s3-region", "", "S3 region (default: $AWS_REGION)")
	fl.BoolVar(&f.secure, "s3-tls", false, "use HTTPS to reach the S3 endpoint")
}

// config returns the S3 store to use, or nil for the JetStream Object Store.
func (f *s3Flags) config() (*objstore.S3Config, error) {
	c := f.cfg
	c.Secure = c.Secure || f.secure
	c = objstore.S3ConfigFromEnv(c)
	if c.Endpoint == "" && c.Bucket == "" {
		return nil, nil
	}
	if c.Endpoint == "" || c.Bucket == "" {
		return nil, fmt.Errorf("volumes in S3 need both --s3-endpoint (or $AWS_ENDPOINT_URL) and --s3-bucket")
	}
	return &c, nil
}

func volumesCmd(g *globals) *cobra.Command {
	s3 := &s3Flags{}
	cmd := &cobra.Command{Use: "volumes", Short: "Inspect, download, roll back and remove volumes"}
	s3.register(cmd.PersistentFlags())
	runAs := func(timeout time.Duration, f func(ctx context.Context, v *objstore.Volumes, c *client.Client) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			v, c, closeConn, err := openVolumes(ctx, g, s3)
			if err != nil {
				return err
			}
			defer closeConn()
			return f(ctx, v, c)
		}
	}
	run := func(timeout time.Duration, f func(ctx context.Context, v *objstore.Volumes) error) func(*cobra.Command, []string) error {
		return runAs(timeout, func(ctx context.Context, v *objstore.Volumes, _ *client.Client) error { return f(ctx, v) })
	}
	cmd.AddCommand(volumesLsCmd(run), volumesFilesCmd(run), volumesGetCmd(run), volumesHistoryCmd(run), volumesRestoreCmd(runAs), volumesRmCmd(run), volumesRecoverCmd(run))
	return cmd
}

// volumesRunner makes a subcommand's RunE: it opens the volumes (openVolumes) with the
// command's connection and S3 flags, and runs f on them for at most timeout.
type volumesRunner func(timeout time.Duration, f func(ctx context.Context, v *objstore.Volumes) error) func(*cobra.Command, []string) error

// openVolumes opens the volumes where the S3 flags say (the JetStream Object Store without them).
func openVolumes(ctx context.Context, g *globals, s3 *s3Flags) (*objstore.Volumes, *client.Client, func(), error) {
	c, closeConn, err := g.connect(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	s3c, err := s3.config()
	if err != nil {
		closeConn()
		return nil, nil, nil, err
	}
	v, err := objstore.Open(ctx, c.JS, s3c, objstore.Options{Log: zap.NewNop()})
	if err != nil {
		closeConn()
		return nil, nil, nil, err
	}
	return v, c, closeConn, nil
}

func volumesLsCmd(run volumesRunner) *cobra.Command {
	var asJSON bool
	ls := &cobra.Command{Use: "ls", Short: "List volumes: latest version, files, bytes, last update and job", Args: cobra.NoArgs}
	ls.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	ls.RunE = run(time.Minute, func(ctx context.Context, v *objstore.Volumes) error {
		infos, err := v.Infos(ctx)
		if err != nil {
			return err
		}
		if asJSON {
			return printJSON(infos)
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tVERSION\tFILES\tBYTES\tUPDATED\tLAST JOB")
		for _, x := range infos {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\n", x.Name, x.Version, x.Files, x.Bytes, x.Updated.Local().Format(time.DateTime), x.LastJob)
		}
		return tw.Flush()
	})
	return ls
}

func volumesFilesCmd(run volumesRunner) *cobra.Command {
	var asJSON bool
	files := &cobra.Command{Use: "files <name> [version]", Short: "List the files of a volume's version (default: the latest)", Args: cobra.RangeArgs(1, 2)}
	files.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	files.RunE = func(cmd *cobra.Command, args []string) error {
		var want uint64
		if len(args) == 2 {
			var err error
			if want, err = strconv.ParseUint(args[1], 10, 64); err != nil || want == 0 {
				return fmt.Errorf("version %q: want a version number from `host volumes history %s`", args[1], args[0])
			}
		}
		return run(time.Minute, func(ctx context.Context, v *objstore.Volumes) error {
			_, fs, err := v.Files(ctx, args[0], want)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(fs)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PATH\tSIZE\tMODE")
			for _, f := range fs {
				path := f.Path
				switch f.Type {
				case "dir":
					path += "/"
				case "symlink":
					path += " -> " + f.Target
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\n", path, f.Size, typedMode(f))
			}
			return tw.Flush()
		})(cmd, args)
	}
	return files
}

func volumesGetCmd(run volumesRunner) *cobra.Command {
	var version uint64
	var outFile string
	get := &cobra.Command{Use: "get <name> [path]", Short: "Write a file of a volume to stdout, or the whole volume (or a directory) as a tar stream", Args: cobra.RangeArgs(1, 2)}
	get.Flags().Uint64Var(&version, "version", 0, "version to read (default: the latest)")
	get.Flags().StringVarP(&outFile, "output", "o", "", "write to this file instead of stdout")
	get.RunE = func(cmd *cobra.Command, args []string) error {
		path := ""
		if len(args) == 2 {
			path = args[1]
		}
		return run(time.Hour, func(ctx context.Context, v *objstore.Volumes) error {
			if outFile != "" {
				return getToFile(ctx, v, args[0], version, path, outFile)
			}
			if isTerminal(os.Stdout) {
				if err := refuseTarOnTerminal(ctx, v, args[0], version, path); err != nil {
					return err
				}
			}
			return v.Get(ctx, args[0], version, path, os.Stdout)
		})(cmd, args)
	}
	return get
}

func volumesHistoryCmd(run volumesRunner) *cobra.Command {
	var asJSON bool
	history := &cobra.Command{Use: "history <name>", Short: "List a volume's kept versions", Args: cobra.ExactArgs(1)}
	history.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	history.RunE = func(cmd *cobra.Command, args []string) error {
		return run(time.Minute, func(ctx context.Context, v *objstore.Volumes) error {
			vs, err := v.History(ctx, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(vs)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "VERSION\tTIME\tJOB\tFILES CHANGED\tBYTES CHANGED\tFILES\tTOTAL BYTES")
			for _, x := range vs {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\n", x.Version, x.Time.Local().Format(time.DateTime), x.JobID, x.FilesChanged, x.Bytes, x.Files, x.TotalBytes)
			}
			return tw.Flush()
		})(cmd, args)
	}
	return history
}

// volumesActRunner is volumesRunner for a subcommand that also records what it did (the audit
// stream), with the client it connected.
type volumesActRunner func(timeout time.Duration, f func(ctx context.Context, v *objstore.Volumes, c *client.Client) error) func(*cobra.Command, []string) error

func volumesRestoreCmd(run volumesActRunner) *cobra.Command {
	restore := &cobra.Command{Use: "restore <name> <version>", Short: "Make a new version equal to an old one (roll an agent's memory back)", Args: cobra.ExactArgs(2)}
	restore.RunE = func(cmd *cobra.Command, args []string) error {
		old, err := strconv.ParseUint(args[1], 10, 64)
		if err != nil || old == 0 {
			return fmt.Errorf("version %q: want a version number from `host volumes history %s`", args[1], args[0])
		}
		return run(5*time.Minute, func(ctx context.Context, v *objstore.Volumes, c *client.Client) error {
			n, err := v.Restore(ctx, args[0], old, "cli-"+ids.New())
			detail := fmt.Sprintf("to version %d", old)
			if err == nil {
				detail = fmt.Sprintf("version %d made equal to version %d", n, old)
			}
			actorOf(c.NC).record(ctx, c.JS, "volume.restore", args[0], detail, err)
			if err != nil {
				return err
			}
			fmt.Printf("%s: version %d is now equal to version %d\n", args[0], n, old)
			return nil
		})(cmd, args)
	}
	return restore
}

func volumesRmCmd(run volumesRunner) *cobra.Command {
	var yes bool
	rm := &cobra.Command{Use: "rm <name>", Short: "Delete a volume and all its versions (asks first, unless --yes)", Args: cobra.ExactArgs(1)}
	rm.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	rm.RunE = func(cmd *cobra.Command, args []string) error {
		return run(5*time.Minute, func(ctx context.Context, v *objstore.Volumes) error {
			info, err := v.Info(ctx, args[0])
			if err != nil {
				return err
			}
			what := fmt.Sprintf("volume %s (%d kept version(s); version %d holds %d files, %d bytes)", info.Name, info.Versions, info.Version, info.Files, info.Bytes)
			if !yes {
				if !isTerminal(os.Stdin) {
					return fmt.Errorf("not removing %s without confirmation: no terminal to ask on; pass --yes", what)
				}
				if !confirm(cmd.InOrStdin(), os.Stderr, "remove "+what+"? [y/N] ") {
					return fmt.Errorf("not removing %s: not confirmed", info.Name)
				}
			}
			if err := v.Remove(ctx, args[0], "cli-"+ids.New()); err != nil {
				return err
			}
			fmt.Println("removed", what)
			return nil
		})(cmd, args)
	}
	return rm
}

func volumesRecoverCmd(run volumesRunner) *cobra.Command {
	var asJSON bool
	var dryRun bool
	recoverCmd := &cobra.Command{Use: "recover", Short: "Rebuild every volume's head and history in NATS from the volume store alone (after NATS lost its data)", Args: cobra.NoArgs,
		Long: "Reads the head marker each commit leaves in the volume store and creates, for every volume NATS has no head for, its head\n" +
			"at the newest version whose manifest and files are all in the store, with its kept history. A head NATS has is never moved.\n" +
			"`host serve` does the same by itself when it starts on a NATS that holds no volume heads."}
	recoverCmd.Flags().BoolVar(&dryRun, "dry-run", false, "say what would be recovered, write nothing")
	recoverCmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	recoverCmd.RunE = run(10*time.Minute, func(ctx context.Context, v *objstore.Volumes) error {
		rep, err := v.Recover(ctx, objstore.RecoverOptions{DryRun: dryRun})
		if err != nil {
			return err
		}
		if asJSON {
			if err := printJSON(rep); err != nil {
				return err
			}
		} else {
			printRecoverReport(os.Stdout, rep)
		}
		return recoverVerdict(rep)
	})
	return recoverCmd
}

// typedMode renders a mode as ls does: "-rw-r--r--", "drwxr-xr-x", "lrwxrwxrwx".
func typedMode(f objstore.FileInfo) string {
	m := f.Mode.Perm()
	switch f.Type {
	case "dir":
		m |= iofs.ModeDir
	case "symlink":
		m |= iofs.ModeSymlink
	}
	return m.String()
}

// refuseTarOnTerminal refuses to write a tar stream (the whole volume, or a directory of it)
// to a terminal, where it would be noise and could set off escape sequences.
func refuseTarOnTerminal(ctx context.Context, v *objstore.Volumes, name string, version uint64, path string) error {
	hint := fmt.Sprintf("not writing a tar stream to the terminal: write it to a file with -o %s.tar, or pipe it (host volumes get %s | tar -t)", name, name)
	p := strings.Trim(path, "/")
	if p == "" || p == "." {
		return errors.New(hint)
	}
	_, fs, err := v.Files(ctx, name, version)
	if err != nil {
		return err
	}
	for _, f := range fs {
		if f.Path == p && f.Type == "dir" {
			return errors.New(hint)
		}
	}
	return nil
}

// getToFile writes what Get gives to file, whole or not at all: a failed read leaves no
// partial file behind.
func getToFile(ctx context.Context, v *objstore.Volumes, name string, version uint64, path, file string) error {
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	defer os.Remove(tmp.Name())
	if err := v.Get(ctx, name, version, path, tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	return nil
}

// confirm asks question on out and reads a yes from in.
func confirm(in io.Reader, out io.Writer, question string) bool {
	fmt.Fprint(out, question)
	answer, _ := bufio.NewReader(in).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "y", "yes":
		return true
	}
	return false
}

// printRecoverReport writes what `volumes recover` found and did.
func printRecoverReport(w io.Writer, rep objstore.RecoverReport) {
	if len(rep.Volumes) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "VOLUME\tSTORE VERSION\tNATS VERSION\tVERSIONS\tACTION")
		for _, x := range rep.Volumes {
			nats := "-"
			if x.NATSVersion > 0 {
				nats = strconv.FormatUint(x.NATSVersion, 10)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\n", x.Name, x.StoreVersion, nats, x.Versions, x.Action)
		}
		tw.Flush()
		for _, x := range rep.Volumes {
			for _, n := range x.Notes {
				fmt.Fprintf(w, "note: %s: %s\n", x.Name, n)
			}
		}
	}
	verb := "recovered"
	if rep.DryRun {
		verb = "would recover"
	}
	fmt.Fprintf(w, "%s: %d volume(s) found, %s %d, skipped %d, broken %d", rep.Store, len(rep.Volumes), verb, rep.Recovered, rep.Skipped, rep.Broken)
	if rep.Stray > 0 {
		fmt.Fprintf(w, ", %d stray object(s) under heads/ ignored", rep.Stray)
	}
	fmt.Fprintln(w)
}

// recoverVerdict fails a recovery that found nothing to recover from, or volumes it could not
// recover, so that a script notices a wrong bucket or a damaged store.
func recoverVerdict(rep objstore.RecoverReport) error {
	switch {
	case len(rep.Volumes) == 0 && len(rep.Unmarked) > 0:
		return fmt.Errorf("%s holds objects of %d volume(s) (%s) but no head marker: they were written by a host from before markers (or by commits that never finished), so the store alone cannot restore them; nothing was changed",
			rep.Store, len(rep.Unmarked), strings.Join(rep.Unmarked, ", "))
	case len(rep.Volumes) == 0:
		return fmt.Errorf("%s holds no volumes (no head markers under heads/): nothing was changed; check --s3-endpoint and --s3-bucket (or, without them, that this is the NATS whose Object Store holds the volumes)", rep.Store)
	case rep.Broken > 0:
		return fmt.Errorf("%d volume(s) have no usable head marker and were not recovered (see the notes above)", rep.Broken)
	}
	return nil
}
