package packages

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agenthost/host/internal/manifest"
)

// bunLayout names the install command and cache layout; it is part of every
// Bun key, so changing them installs afresh instead of reusing old results.
// v2: copies (--backend=copyfile) made by an unprivileged installer; v1 hard
// linked, so a v1 install may share inodes with host files and is never reused.
const bunLayout = "bun-v2 install --production --ignore-scripts --linker=hoisted --backend=copyfile; node_modules/"

type bunTool struct {
	path    string
	version string
}

func (i *Installer) bunTool(ctx context.Context) (*bunTool, error) {
	i.toolsMu.Lock()
	defer i.toolsMu.Unlock()
	if i.bun != nil {
		return i.bun, nil
	}
	path, err := exec.LookPath(i.o.Bun)
	if err != nil {
		return nil, fmt.Errorf("packages: bun is needed to install npm packages but %q was not found: install Bun or configure its path: %w", i.o.Bun, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// As the installer will run it: a bun the installer's user cannot run fails here, once.
	out, err := i.command(ctx, path, "--version").Output()
	if err != nil {
		return nil, fmt.Errorf("packages: %s --version as %s: %w%s", path, i.as, err, i.as.hint())
	}
	i.bun = &bunTool{path: path, version: strings.TrimSpace(string(out))}
	return i.bun, nil
}

// bunLocator returns the bun binary to scan imports with; called only for a
// TS/JS function that has no package.json declaring its dependencies.
type bunLocator func(context.Context) (string, error)

// bunOnPath is the bun of Needs, which has no Installer to configure one.
func bunOnPath(context.Context) (string, error) {
	path, err := exec.LookPath("bun")
	if err != nil {
		return "", fmt.Errorf("packages: bun is needed to find a TS/JS function's imports but was not found on the PATH: install Bun: %w", err)
	}
	return path, nil
}

func (i *Installer) bunPath(ctx context.Context) (string, error) {
	tool, err := i.bunTool(ctx)
	if err != nil {
		return "", err
	}
	return tool.path, nil
}

// packageJSON is the part of a package.json that decides whether to install.
type packageJSON struct {
	Dependencies         map[string]any `json:"dependencies"`
	OptionalDependencies map[string]any `json:"optionalDependencies"`
}

func inspectBun(ctx context.Context, bun bunLocator, codeDir, entry string) (*source, error) {
	pj := filepath.Join(codeDir, "package.json")
	// Checked even when it declares nothing to install: what the folder says is refused at
	// load, and must be here too, or a function could run that `host check` refuses.
	b, locks, locals, err := manifest.Bun(codeDir)
	if err != nil {
		return nil, err
	}
	if b != nil {
		var m packageJSON
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("packages: %s is not valid JSON: %w", pj, err)
		}
		var names []string
		for n := range m.Dependencies {
			names = append(names, n)
		}
		for n := range m.OptionalDependencies {
			names = append(names, n)
		}
		if len(names) > 0 {
			slices.Sort(names)
			files := map[string][]byte{}
			for name, lb := range locks {
				files[name] = lb
			}
			if len(files) == 0 {
				// bun install --production still resolves devDependencies:
				// without a lockfile that means fetching their metadata, and
				// failing on one that does not resolve, for nothing. With a
				// lockfile, --production freezes it, and the package.json
				// must stay as the lockfile knows it.
				if b, err = withoutDevDependencies(b); err != nil {
					return nil, fmt.Errorf("packages: %s: %w", pj, err)
				}
			}
			files["package.json"] = b
			return &source{kind: Bun, pkgs: slices.Compact(names), files: files, locals: locals, declared: true}, nil
		}
		// A package.json without dependencies (say, only "type": "module")
		// does not pin anything: fall back to the imports.
	}

	path, err := bun(ctx)
	if err != nil {
		return nil, err
	}
	names, err := bareImports(ctx, path, codeDir, entry)
	if err != nil {
		return nil, fmt.Errorf("packages: %w", err)
	}
	if len(names) == 0 {
		return nil, nil
	}
	deps := make(map[string]string, len(names))
	for _, n := range names {
		deps[n] = "latest"
	}
	gen, err := json.MarshalIndent(map[string]any{
		"name":         "function-packages",
		"private":      true,
		"dependencies": deps,
	}, "", "  ")
	if err != nil {
		return nil, err
	}
	return &source{kind: Bun, pkgs: names, files: map[string][]byte{"package.json": gen}}, nil
}

func withoutDevDependencies(b []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	if _, ok := m["devDependencies"]; !ok {
		return b, nil
	}
	delete(m, "devDependencies")
	return json.MarshalIndent(m, "", "  ")
}

// runBun installs the package.json in dir into dir/node_modules.
//
// --production skips devDependencies and, when there is a lockfile, freezes
// it: a bun.lock that does not match its package.json fails the install
// (the lockfile is there to pin versions). --ignore-scripts runs no package code
// outside the jail; --linker=hoisted makes a plain node_modules tree (the
// isolated linker's symlinks could point into the temporary directory, which
// is renamed). Bun's download cache is shared by every install, under
// CacheDir, so that it depends neither on root's home nor on the install it
// came from.
func (i *Installer) runBun(ctx context.Context, dir string, out *jobLog) error {
	tool, err := i.bunTool(ctx)
	if err != nil {
		return err
	}
	// --backend=copyfile: Bun's default hard links node_modules to its download cache (and a
	// local dependency's files to their originals), so the host's later chmods would change
	// those inodes too, and the cache's files would show through every install.
	argv := []string{tool.path, "install", "--production", "--ignore-scripts", "--linker=hoisted", "--backend=copyfile", "--no-progress"}
	if i.o.NpmRegistry != "" {
		argv = append(argv, "--registry="+i.o.NpmRegistry)
	}
	env := i.toolEnv("BUN_INSTALL_CACHE_DIR=" + i.as.cacheDir("bun"))
	if err := i.run(ctx, "bun install", argv, env, dir, out); err != nil {
		if strings.Contains(err.Error(), "lockfile is frozen") {
			return fmt.Errorf("%w (the function's bun.lock does not match its package.json: run bun install in the function folder and deploy the updated bun.lock, or remove it)", err)
		}
		return err
	}
	// Only optional dependencies that all failed leave none; mount an empty one.
	return os.MkdirAll(filepath.Join(dir, "node_modules"), 0o755)
}
