package runtimes

import (
	"embed"
	"fmt"
	"os"
	"path/filepath"
)

// File names of the shims inside the shim directory.
const (
	pythonShim = "shim.py"
	// pythonFork is the fork server shim.py --template imports (see BuildTemplate).
	pythonFork = "forkserver.py"
	bunShim    = "shim.mjs"
)

//go:embed shim.py forkserver.py shim.mjs warm.sh bash.sh
var shims embed.FS

// WriteShims writes the embedded shim files into dir, creating it if needed.
// Files are 0644 and the dir 0755 whatever the umask, because the job may run
// as another user inside the jail and only needs to read them. Each file is
// replaced atomically, so a job starting meanwhile sees the old or the new
// shim, never half of one.
func WriteShims(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("runtimes: write shims: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("runtimes: write shims: %w", err)
	}
	for _, name := range []string{pythonShim, pythonFork, bunShim, bashWarm, bashRun} {
		data, err := shims.ReadFile(name)
		if err != nil {
			return fmt.Errorf("runtimes: write shims: %w", err)
		}
		if err := writeFileAtomic(filepath.Join(dir, name), data, 0o644); err != nil {
			return fmt.Errorf("runtimes: write shims: %w", err)
		}
	}
	return nil
}

func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op once renamed
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	// Chmod on the file, not the mode at creation, so the umask cannot strip
	// the world-read bit.
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
