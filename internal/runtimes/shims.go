package runtimes

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
)

// File names of the shims inside the shim directory.
const (
	pythonShim = "shim.py"
	// pythonShimModule is the shim proper, which shim.py imports (so that its bytecode can be
	// compiled ahead: see CompileShims).
	pythonShimModule = "_agenthost_shim.py"
	// pythonFork is the fork server shim.py --template imports (see BuildTemplate).
	pythonFork = "forkserver.py"
	bunShim    = "shim.mjs"
	// pythonReuse and bunReuse are the loops of a reused jail (see BuildReuse), which the shims
	// load with --reuse.
	pythonReuse = "_agenthost_reuse.py"
	bunReuse    = "reuse.mjs"
)

//go:embed shim.py _agenthost_shim.py _agenthost_reuse.py forkserver.py shim.mjs reuse.mjs warm.sh bash.sh reuse.sh
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
	for _, name := range shimFiles {
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

// shimFiles are the files WriteShims writes.
var shimFiles = []string{pythonShim, pythonShimModule, pythonReuse, pythonFork, bunShim, bunReuse, bashWarm, bashRun, bashReuse}

// pyCompile compiles the files it is given into their __pycache__, hash-checked: the
// interpreter uses the bytecode while the source's hash matches it, whatever the files' times.
const pyCompile = `import py_compile, sys
for f in sys.argv[1:]:
    py_compile.compile(f, doraise=True, invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
`

// CompileShims compiles the Python shim modules WriteShims wrote into dir, with every distinct
// python3 on paths (PATH values: the jails' and the host's own), so that a job's interpreter
// reads their bytecode instead of compiling them on every start (jobs run with -B: nothing is
// written in a jail). Each interpreter writes the files tagged with its own version, which
// only it reads. No python3 at all is not an error (nothing runs Python here); one that fails
// is: Python jobs then compile the shim themselves, as before, and start slower.
func CompileShims(dir string, paths ...string) error {
	var errs []error
	for _, py := range pythons(paths) {
		cmd := exec.Command(py, "-I", "-c", pyCompile, filepath.Join(dir, pythonShimModule), filepath.Join(dir, pythonFork), filepath.Join(dir, pythonReuse))
		if out, err := cmd.CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("runtimes: compile the Python shims in %s with %s: %w: %s", dir, py, err, bytes.TrimSpace(out)))
		}
	}
	cache := filepath.Join(dir, "__pycache__")
	if err := filepath.WalkDir(cache, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		// Readable by the jobs' user whatever the host's umask, as the shims are.
		mode := os.FileMode(0o644)
		if d.IsDir() {
			mode = 0o755
		}
		return os.Chmod(p, mode)
	}); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("runtimes: make the compiled shims in %s readable: %w", cache, err))
	}
	return errors.Join(errs...)
}

// pythons are the distinct interpreters (by the file they resolve to) "python3" names on paths.
func pythons(paths []string) []string {
	var found []string
	seen := map[string]bool{}
	for _, path := range paths {
		for _, dir := range filepath.SplitList(path) {
			bin := filepath.Join(dir, "python3")
			real, err := filepath.EvalSymlinks(bin)
			if err != nil {
				continue
			}
			if info, err := os.Stat(real); err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
				continue
			}
			if !seen[real] {
				seen[real] = true
				found = append(found, bin)
			}
			break // the first on this PATH is the one its jobs run
		}
	}
	return found
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
