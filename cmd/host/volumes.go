package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

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
	open := func(ctx context.Context) (*objstore.Volumes, func(), error) {
		c, closeConn, err := g.connect(ctx)
		if err != nil {
			return nil, nil, err
		}
		s3c, err := s3.config()
		if err != nil {
			closeConn()
			return nil, nil, err
		}
		var b objstore.Backend
		if s3c != nil {
			b, err = objstore.NewS3Backend(ctx, *s3c)
		} else {
			b, err = objstore.NewJetStreamBackend(ctx, c.JS, objstore.DefaultJetStreamBucket, 0)
		}
		if err != nil {
			closeConn()
			return nil, nil, err
		}
		v, err := objstore.New(ctx, c.JS, b, objstore.Options{Log: zap.NewNop()})
		if err != nil {
			closeConn()
			return nil, nil, err
		}
		return v, closeConn, nil
	}
	run := func(timeout time.Duration, f func(ctx context.Context, v *objstore.Volumes) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			v, closeConn, err := open(ctx)
			if err != nil {
				return err
			}
			defer closeConn()
			return f(ctx, v)
		}
	}
	var version uint64
	ls := &cobra.Command{Use: "ls", Short: "List volumes", Args: cobra.NoArgs}
	ls.RunE = run(time.Minute, func(ctx context.Context, v *objstore.Volumes) error {
		names, err := v.List(ctx)
		for _, n := range names {
			fmt.Println(n)
		}
		return err
	})
	get := &cobra.Command{Use: "get <name> [path]", Short: "Write a file of a volume to stdout, or the whole volume as a tar stream", Args: cobra.RangeArgs(1, 2)}
	get.Flags().Uint64Var(&version, "version", 0, "version to read (default: the latest)")
	get.RunE = func(cmd *cobra.Command, args []string) error {
		path := ""
		if len(args) == 2 {
			path = args[1]
		}
		return run(time.Hour, func(ctx context.Context, v *objstore.Volumes) error {
			return v.Get(ctx, args[0], version, path, os.Stdout)
		})(cmd, args)
	}
	history := &cobra.Command{Use: "history <name>", Short: "List a volume's kept versions", Args: cobra.ExactArgs(1)}
	history.RunE = func(cmd *cobra.Command, args []string) error {
		return run(time.Minute, func(ctx context.Context, v *objstore.Volumes) error {
			vs, err := v.History(ctx, args[0])
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "VERSION\tTIME\tJOB\tFILES CHANGED\tBYTES CHANGED\tFILES\tTOTAL BYTES")
			for _, x := range vs {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\n", x.Version, x.Time.Local().Format(time.DateTime), x.JobID, x.FilesChanged, x.Bytes, x.Files, x.TotalBytes)
			}
			return tw.Flush()
		})(cmd, args)
	}
	restore := &cobra.Command{Use: "restore <name> <version>", Short: "Make a new version equal to an old one (roll an agent's memory back)", Args: cobra.ExactArgs(2)}
	restore.RunE = func(cmd *cobra.Command, args []string) error {
		old, err := strconv.ParseUint(args[1], 10, 64)
		if err != nil || old == 0 {
			return fmt.Errorf("version %q: want a version number from `host volumes history %s`", args[1], args[0])
		}
		return run(5*time.Minute, func(ctx context.Context, v *objstore.Volumes) error {
			n, err := v.Restore(ctx, args[0], old, "cli-"+ids.New())
			if err != nil {
				return err
			}
			fmt.Printf("%s: version %d is now equal to version %d\n", args[0], n, old)
			return nil
		})(cmd, args)
	}
	rm := &cobra.Command{Use: "rm <name>", Short: "Delete a volume and all its versions", Args: cobra.ExactArgs(1)}
	rm.RunE = func(cmd *cobra.Command, args []string) error {
		return run(5*time.Minute, func(ctx context.Context, v *objstore.Volumes) error {
			return v.Remove(ctx, args[0], "cli-"+ids.New())
		})(cmd, args)
	}
	cmd.AddCommand(ls, get, history, restore, rm)
	return cmd
}
