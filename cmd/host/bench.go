package main

import (
	"os"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/agenthost/host/internal/bench"
)

func benchCmd(_ *globals) *cobra.Command {
	o := bench.Options{Progress: os.Stderr}
	var forkOnly, pathsOnly bool
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the host against a plain bubblewrap start, its own jail and a durable JetStream call, side by side in one run: a fresh jail per message and reuse:, the CPU a call costs, and where a cold job's time goes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if pathsOnly || !forkOnly {
				paths, err := bench.RunPaths(cmd.Context(), o.N, os.Stderr)
				if err != nil {
					return err
				}
				defer bench.ReportPaths(os.Stdout, paths) // with the rest of the report
				if pathsOnly {
					return nil
				}
			}
			if !forkOnly {
				// The reused jails' own run: their floors again, and the map of 1,000 items
				// onto a reused no-op against the same map served fresh.
				reuse, err := bench.RunReuse(cmd.Context(), o.N, os.Stderr)
				if err != nil {
					return err
				}
				res, err := bench.Run(cmd.Context(), o)
				if err != nil {
					return err
				}
				mapJoin, err := bench.RunMapJoin(cmd.Context(), os.Stderr, o.Parallel)
				if err != nil {
					return err
				}
				bench.Report(os.Stdout, res, o.Parallel)
				bench.ReportMapJoin(os.Stdout, mapJoin)
				bench.ReportReuse(os.Stdout, reuse)
			}
			chain, err := bench.RunChain(cmd.Context(), os.Stderr)
			if err != nil {
				return err
			}
			forkChain, err := bench.RunChainFork(cmd.Context(), os.Stderr)
			if err != nil {
				return err
			}
			fork, err := bench.RunFork(cmd.Context(), o.N, os.Stderr)
			if err != nil {
				return err
			}
			bench.ReportChain(os.Stdout, chain)
			bench.ReportChain(os.Stdout, forkChain)
			bench.ReportFork(os.Stdout, fork, chain, forkChain)
			return nil
		},
	}
	cmd.Flags().IntVar(&o.N, "n", 300, "runs per measurement")
	cmd.Flags().IntVar(&o.Parallel, "parallel", runtime.NumCPU(), "concurrent callers for the throughput runs")
	cmd.Flags().BoolVar(&pathsOnly, "paths-only", false, "measure only a fresh jail per message against reuse: (and the floors: plain bwrap, a jailed python3 -c pass, a durable JetStream call) at 2 and 8 callers, with the CPU a call costs")
	cmd.Flags().BoolVar(&forkOnly, "fork-only", false, "measure only the fork per job (serve --fork) against the floor, and the 40-step chain with and without it")
	return cmd
}
