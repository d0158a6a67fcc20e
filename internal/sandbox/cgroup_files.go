package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// oomKills is how many processes the kernel killed for the memory limit.
func (g *runGroup) oomKills() uint64 {
	if g.version == CgroupV2 {
		return readKeyed(filepath.Join(g.memDir, "memory.events"), "oom_kill")
	}
	return readKeyed(filepath.Join(g.memDir, "memory.oom_control"), "oom_kill")
}

// peaked reports whether the group's peak usage reached its memory limit
// (within the slack of a page allocation that failed) or pids limit; 0
// limits are never reached. The peaks count the group's descendants too.
func (g *runGroup) peaked(memory int64, pids int) (mem, pidsHit bool) {
	if memory > 0 {
		name := "memory.peak"
		if g.version == CgroupV1 {
			name = "memory.max_usage_in_bytes"
		}
		if n, err := readUint(filepath.Join(g.memDir, name)); err == nil {
			mem = int64(n) >= memory-(2<<20)
		}
	}
	if pids > 0 {
		if n, err := readUint(filepath.Join(g.pidsDir, "pids.peak")); err == nil {
			pidsHit = int(n) >= pids
		}
	}
	return mem, pidsHit
}

func readUint(path string) (uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
}

// pidsRefused is how many forks failed on the pids limit.
func (g *runGroup) pidsRefused() uint64 {
	return readKeyed(filepath.Join(g.pidsDir, "pids.events"), "max")
}

// writeCgroupFile writes one value to a control file. Control files exist
// already; O_CREATE is not used, so a typo cannot create a plain file.
func writeCgroupFile(dir, name, value string) error {
	p := filepath.Join(dir, name)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", value, p, err)
	}
	return nil
}

func writeCgroupFileIfExists(dir, name, value string) error {
	if _, err := os.Stat(filepath.Join(dir, name)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return writeCgroupFile(dir, name, value)
}

// readKeyed returns the value of key in a flat-keyed file ("key value"
// lines), 0 when either is missing.
func readKeyed(path, key string) uint64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return keyedValue(string(data), key)
}

// keyedValue is readKeyed on a file's content.
func keyedValue(content, key string) uint64 {
	for line := range strings.Lines(content) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && k == key {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}
