package packages

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/manifest"
)

// pipLayout names the install command and cache layout (see bunLayout).
const pipLayout = "pip-v1 install --only-binary=:all: --target site/"

type pipTool struct {
	// argv is how to run pip for Options.Python, up to the subcommand.
	argv []string
	// python identifies the target interpreter: version, platform, cache tag.
	python     string
	pipVersion string
}

// pyInfo asks a python for what identifies it.
type pyInfo struct {
	ident      string // "3.11.2 linux-x86_64 cpython-311"
	minor      string // "3.11"
	executable string // real path of the interpreter
}

func (i *Installer) probePython(ctx context.Context, py string) (*pyInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	const script = `import sys, sysconfig
print(sys.version.split()[0], sysconfig.get_platform(), sys.implementation.cache_tag)
print("%d.%d" % sys.version_info[:2])
print(sys.executable)`
	out, err := i.command(ctx, py, "-I", "-c", script).Output()
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 3 {
		return nil, fmt.Errorf("unexpected output %q", out)
	}
	exe := strings.TrimSpace(lines[2])
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	return &pyInfo{ident: strings.TrimSpace(lines[0]), minor: strings.TrimSpace(lines[1]), executable: exe}, nil
}

// probePip returns the version of py's pip, and whether it is at least 22.3
// (the first with --python).
func (i *Installer) probePip(ctx context.Context, py string) (version string, hasPython bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := i.command(ctx, py, "-m", "pip", "--version").Output()
	if err != nil {
		return "", false, err
	}
	f := strings.Fields(string(out)) // pip 23.0.1 from /usr/lib/python3/dist-packages/pip (python 3.11)
	if len(f) < 2 || f[0] != "pip" {
		return "", false, fmt.Errorf("unexpected output %q", out)
	}
	version = f[1]
	parts := strings.SplitN(version, ".", 3)
	major, _ := strconv.Atoi(parts[0])
	minor := 0
	if len(parts) > 1 {
		minor, _ = strconv.Atoi(parts[1])
	}
	return version, major > 22 || major == 22 && minor >= 3, nil
}

// pipTool finds how to run pip for Options.Python. Debian's python3 has no
// pip unless python3-pip is installed; then another python3 of the same
// minor version (pyenv, a venv...) with pip >= 22.3 runs pip with
// --python <Options.Python>: pip re-executes itself under that interpreter,
// so that the tags, the resolution and the .pyc files are those of the
// jail's python.
func (i *Installer) pipTool(ctx context.Context) (*pipTool, error) {
	i.toolsMu.Lock()
	defer i.toolsMu.Unlock()
	if i.pip != nil {
		return i.pip, nil
	}
	py, err := exec.LookPath(i.o.Python)
	if err != nil {
		return nil, fmt.Errorf("packages: python %q (the jail's python, for requirements.txt) was not found: install it or configure its path: %w", i.o.Python, err)
	}
	// Probed as the installer will run them, so that a pip its user cannot run (one under
	// /root) is passed over here rather than failing every install.
	target, err := i.probePython(ctx, py)
	if err != nil {
		return nil, fmt.Errorf("packages: cannot run python %s as %s: %w%s", py, i.as, err, i.as.hint())
	}
	if v, _, err := i.probePip(ctx, py); err == nil {
		i.pip = &pipTool{argv: []string{py, "-m", "pip"}, python: target.ident, pipVersion: v}
		return i.pip, nil
	}
	for _, cand := range []string{"python3", "python" + target.minor} {
		p, err := exec.LookPath(cand)
		if err != nil {
			continue
		}
		other, err := i.probePython(ctx, p)
		if err != nil || other.minor != target.minor || other.executable == target.executable {
			continue
		}
		v, ok, err := i.probePip(ctx, other.executable)
		if err != nil || !ok {
			continue
		}
		i.log.Info("python has no pip; installing for it with another python's pip --python",
			zap.String("python", py), zap.String("pip_python", other.executable), zap.String("pip", v))
		i.pip = &pipTool{
			argv:       []string{other.executable, "-m", "pip", "--python", py},
			python:     target.ident,
			pipVersion: v + " via " + other.ident,
		}
		return i.pip, nil
	}
	return nil, fmt.Errorf("packages: %s has no pip (%s -m pip fails) and no other python%s with pip >= 22.3 that %s can run is on the PATH: "+
		"install pip for it (apt-get install python3-pip)", py, py, target.minor, i.as)
}

func inspectPip(codeDir string) (*source, error) {
	b, locals, err := manifest.Pip(codeDir)
	if err != nil || b == nil {
		return nil, err
	}
	names := requirementNames(b)
	if len(names) == 0 {
		return nil, nil // comments and options only
	}
	return &source{kind: Pip, pkgs: names, files: map[string][]byte{"requirements.txt": b}, locals: locals}, nil
}

// requirementNames lists the project names a requirements file asks for,
// for messages; option lines (-r, --index-url, -e ...) are skipped.
func requirementNames(b []byte) []string {
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if k := strings.Index(line, "#"); k == 0 || k > 0 && (line[k-1] == ' ' || line[k-1] == '\t') {
			line = line[:k]
		}
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "-") {
			continue
		}
		if k := strings.IndexAny(line, "<>=!~;[@( \t"); k > 0 {
			line = line[:k]
		}
		names = append(names, line)
	}
	return names
}

// runPip installs dir/requirements.txt into dir/site.
//
// --only-binary=:all: installs wheels only, since building an sdist runs its
// code outside the jail. Index: Options.PipIndexURL as --index-url, or
// --no-index when it is NoIndex, plus every --find-links. pip's own
// configuration files and PIP_* variables are ignored (PIP_CONFIG_FILE is the
// null device and the environment is rebuilt): they would change an install
// without changing its key. --target bypasses Debian's externally-managed
// guard, which protects only the system site-packages.
func (i *Installer) runPip(ctx context.Context, dir string, out *jobLog) error {
	tool, err := i.pipTool(ctx)
	if err != nil {
		return err
	}
	argv := append(append([]string(nil), tool.argv...),
		"install", "--no-input", "--disable-pip-version-check", "--no-warn-script-location",
		"--progress-bar=off", "--only-binary=:all:",
		"--target", filepath.Join(dir, "site"),
		"--requirement", filepath.Join(dir, "requirements.txt"))
	switch idx := i.o.PipIndexURL; idx {
	case "":
	case NoIndex:
		argv = append(argv, "--no-index")
	default:
		argv = append(argv, "--index-url", idx)
	}
	for _, fl := range i.o.PipFindLinks {
		argv = append(argv, "--find-links", fl)
	}
	env := i.toolEnv(
		"PIP_CONFIG_FILE="+os.DevNull,
		"PIP_CACHE_DIR="+i.as.cacheDir("pip"),
		"PYTHONNOUSERSITE=1",
		"PIP_ROOT_USER_ACTION=ignore", // --target is not the system's site-packages
	)
	if err := i.run(ctx, "pip install", argv, env, dir, out); err != nil {
		return err
	}
	return os.MkdirAll(filepath.Join(dir, "site"), 0o755)
}
