package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/agenthost/host/internal/scaffold"
)

func newCmd() *cobra.Command {
	var lang, dir string
	cmd := &cobra.Command{
		Use:   "new <name>",
		Short: "Write a working function to start from, its annotations explained",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := scaffold.Write(dir, args[0], lang)
			if err != nil {
				return err
			}
			fmt.Printf("wrote %s; check it with `host check %s`, run it with `host invoke %s --wait` once a host serves %s\n", path, dir, args[0], dir)
			return nil
		},
	}
	cmd.Flags().StringVar(&lang, "lang", "py", "language: py, ts or sh")
	cmd.Flags().StringVar(&dir, "functions", "functions", "the functions directory to write into")
	return cmd
}
