package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Set by scripts/release with -ldflags -X, and used only where the build info lacks them: the Go
// toolchain stamps VCS settings only when it finds a .git directory above the package, and a
// linked git worktree has a .git file instead (golang/go#58218), so a build there, or from a
// source tarball, would otherwise say "unknown".
var (
	ldVersion    string
	ldCommit     string
	ldCommitTime string
	ldModified   string
)

// buildInfo is what a binary says about itself. It comes from the build info the Go toolchain
// embeds (module version, and VCS settings when built in a checkout), so a plain `go build` in a
// clone says which commit it is without any stamping.
type buildInfo struct {
	Version    string `json:"version"`
	Commit     string `json:"commit"`
	CommitTime string `json:"commit_time"`
	Modified   bool   `json:"modified"`
	GoVersion  string `json:"go_version"`
	Platform   string `json:"platform"`
}

func readBuildInfo() buildInfo {
	b := buildInfo{Version: "unknown", Commit: "unknown", CommitTime: "unknown", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if ldVersion != "" {
		b.Version = ldVersion
	}
	if ldCommit != "" {
		b.Commit, b.Modified = ldCommit, ldModified == "true"
	}
	if ldCommitTime != "" {
		b.CommitTime = ldCommitTime
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	// A release names itself (its file name carries the same version); otherwise the toolchain's
	// module version: a tag, a pseudo-version, or "(devel)".
	if v := info.Main.Version; v != "" && ldVersion == "" {
		b.Version = v
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.time":
			b.CommitTime = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// commit is the revision as people compare it: a binary built from a tree with uncommitted
// changes is not that commit, and says so.
func (b buildInfo) commit() string {
	if b.Modified {
		return b.Commit + "-dirty"
	}
	return b.Commit
}

// String is both `host version` and, through cobra's default version template ("host version
// %s"), `host --version`, so the two can never disagree.
func (b buildInfo) String() string {
	return fmt.Sprintf("%s\ncommit: %s\ntime:   %s\ngo:     %s %s", b.Version, b.commit(), b.CommitTime, b.GoVersion, b.Platform)
}

func versionText() string { return readBuildInfo().String() }

func versionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the module version, commit, commit time and Go version of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b := readBuildInfo()
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(b)
			}
			_, err := fmt.Fprintf(out, "host version %s\n", b)
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the build information as JSON")
	return cmd
}
