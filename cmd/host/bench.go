package main

import (
	"os"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/agenthost/host/internal/bench"
)

func benchCmd(_ *globals) *cobra.Command {
	o := bench.Options{Progress: os.Stderr}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the host against a plain bubblewrap start and its own jail, side by side in one run, and say where a cold job's time goes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := bench.Run(cmd.Context(), o)
			if err != nil {
				return err
			}
			chain, err := bench.RunChain(cmd.Context(), os.Stderr)
			if err != nil {
				return err
			}
			mapJoin, err := bench.RunMapJoin(cmd.Context(), os.Stderr, o.Parallel)
			if err != nil {
				return err
			}
			bench.Report(os.Stdout, res, o.Parallel)
			bench.ReportChain(os.Stdout, chain)
			bench.ReportMapJoin(os.Stdout, mapJoin)
			return nil
		},
	}
	cmd.Flags().IntVar(&o.N, "n", 300, "runs per measurement")
	cmd.Flags().IntVar(&o.Parallel, "parallel", runtime.NumCPU(), "concurrent callers for the throughput runs")
	return cmd
}
