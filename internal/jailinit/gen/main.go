// Command gen builds the jail init (internal/jailinit/cmd/jailinit) for
// every architecture the host ships for, as static stripped binaries, into
// the current directory (package initbin, whose gen.go runs it), and writes
// sources.txt, the manifest (package sources) that initbin's test compares
// with the sources to tell that the binaries are stale.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/agenthost/host/internal/jailinit/sources"
)

// arches are the architectures of scripts/release and the Dockerfile.
var arches = []string{"amd64", "arm64"}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "jailinit gen:", err)
		os.Exit(1)
	}
}

func run() error {
	out, err := os.Getwd()
	if err != nil {
		return err
	}
	root, err := moduleRoot(out)
	if err != nil {
		return err
	}
	for _, arch := range arches {
		bin := filepath.Join(out, "jailinit-linux-"+arch)
		cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w", "-o", bin, "./internal/jailinit/cmd/jailinit")
		cmd.Dir = root
		// -trimpath and no VCS stamp: the binary depends on the sources and
		// the toolchain only, not on where or in which checkout it was built.
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("build the jail init for linux/%s: %w", arch, err)
		}
	}
	m, err := sources.Manifest(root)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "sources.txt"), []byte(m), 0o644)
}

// moduleRoot is the nearest directory at or above dir that holds go.mod.
func moduleRoot(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if d == filepath.Dir(d) {
			return "", errors.New("no go.mod at or above " + dir)
		}
	}
}
