package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/agenthost/host/internal/flowgraph"
	"github.com/agenthost/host/internal/functions"
)

func wiringCmd() *cobra.Command {
	var asJSON, asDOT bool
	cmd := &cobra.Command{
		Use:   "wiring [dir]",
		Short: "Show the graph the annotations of a functions directory make, without running anything",
		Long: `Show how the functions of a directory (default: functions) are wired: the subjects and schedules that start them, their next: edges with their if, else and each conditions, the subjects that leave the host, and the error handlers (on: agent.error.<function>). Loops are marked.

It reads the directory only, as host check does; no NATS is needed. --dot writes Graphviz (host wiring --dot | dot -Tsvg > wiring.svg). Files that are refused are named on stderr, left out of the graph, and make the exit status 1.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if asJSON && asDOT {
				return errors.New("--json and --dot: choose one")
			}
			dir := "functions"
			if len(args) == 1 {
				dir = args[0]
			}
			fns, errs := functions.Load(dir)
			if fns == nil {
				return errors.Join(errs...)
			}
			g := flowgraph.Build(fns)
			var err error
			switch {
			case asJSON:
				err = printJSON(g)
			case asDOT:
				err = g.WriteDOT(os.Stdout)
			default:
				err = g.WriteText(os.Stdout)
			}
			if err != nil {
				return fmt.Errorf("write the graph: %w", err)
			}
			for _, err := range errs {
				fmt.Fprintln(os.Stderr, "refused:", err)
			}
			if len(errs) > 0 {
				return fmt.Errorf("%d of %d function files refused: the graph leaves them out", len(errs), len(fns)+len(errs))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON: nodes and edges")
	cmd.Flags().BoolVar(&asDOT, "dot", false, "print Graphviz DOT")
	return cmd
}
