// Package packages installs the third-party packages a function imports, so
// that nobody installs anything by hand and the jail never needs network:
//
//   - A TS/JS function's npm packages are installed with Bun: the folder's
//     package.json (and bun.lock or bun.lockb) when it declares dependencies,
//     otherwise a generated package.json listing every bare import of the
//     entry file (and of the local modules it imports) at "latest"; Bun's
//     transpiler finds the imports, in one bun process per function load.
//   - A Python function's requirements.txt is installed with pip into a
//     --target directory that the jail's python imports through PYTHONPATH.
//
// Installs run on the host, outside the jail, once per content key (a hash of
// exactly what determines the result, see Needs), into a cache directory that
// the runner mounts read-only into the jail. A half-finished install is never
// used: it is built in a temporary directory and renamed into place at the
// end. Concurrent callers of one key wait for a single install, inside the
// process (singleflight) and across processes (a lock file). A failed install
// is not cached: the next run tries again.
//
// Because installs run outside the jail, they never run package code: Bun
// gets --ignore-scripts (no lifecycle scripts, not even for Bun's trusted
// dependencies) and pip gets --only-binary=:all: (wheels only: building an
// sdist would run its setup.py). A package that needs either fails to
// install, or installs without its postinstall step.
//
// Nor may an install reach beyond the function, since the function's author
// writes its manifests and the host is often root:
//
//   - A manifest names registries, URLs and paths inside the function folder
//     only (see manifest.Check): file:/host/dir, link:, -r /etc/shadow and the
//     like are refused when the function is loaded, and again here.
//   - The installer never runs in the function folder, nor as root: it gets a
//     staging directory holding copies of the manifests and of the local
//     dependencies they name, and on a root host it runs as an unprivileged
//     user (Options.UID, the jail's), who owns only the staging directory and
//     its own download caches. Where bubblewrap works, each package manager
//     also gets a mount namespace holding only the system (/usr, /etc), those
//     directories and the operator's find-links directories: other functions'
//     snapshots, the host's data and anything else world-readable stay out.
//   - Bun copies files into node_modules (--backend=copyfile): a hard link
//     would share an inode with the download cache, or with whatever a
//     dependency pointed at. Once the installer is gone, the host takes the
//     tree back through file descriptors, never following a link, and refuses
//     a file that has another hard link (or is a fifo or device) instead of
//     changing its mode (see seal).
package packages

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"
)

// Kind is the package manager a function's packages come from.
type Kind string

const (
	Bun Kind = "bun" // npm packages, installed with bun install
	Pip Kind = "pip" // Python requirements, installed with pip install --target
)

// Where an install appears inside the jail. Bun resolves a bare import by
// walking up from the importing file, so with the function's code at
// /host/fn, /host/node_modules is found.
const (
	BunTarget = "/host/node_modules"
	PipTarget = "/host/python"
)

// NoIndex as Options.PipIndexURL makes pip use only Options.PipFindLinks
// (pip's --no-index).
const NoIndex = "none"

// Options configure an Installer.
type Options struct {
	// CacheDir holds the installs (e.g. data/packages). It is created if
	// missing. When the host runs as root and jails run as another uid, that
	// uid must be able to traverse every parent of CacheDir (mode o+x).
	CacheDir string
	// Bun is the bun binary; default "bun" on the PATH.
	Bun string
	// Python is the python the installed packages are for: the jail's
	// python; default /usr/bin/python3. When it has no pip, another python3
	// of the same version with pip >= 22.3 on the PATH installs for it
	// (pip --python).
	Python string
	// PipIndexURL is pip's --index-url; empty means pip's default (PyPI),
	// NoIndex ("none") means --no-index: only PipFindLinks.
	PipIndexURL string
	// PipFindLinks are pip's --find-links (directories of wheels or URLs).
	PipFindLinks []string
	// NpmRegistry is bun's --registry; empty means Bun's default.
	NpmRegistry string
	// Timeout bounds one install; default 10 minutes.
	Timeout time.Duration
	// Log gets one line per install; nil logs nothing.
	Log *zap.Logger
	// UID and GID are the unprivileged host user the package managers run as
	// when the host runs as root; both zero are DefaultUID and DefaultGID
	// (the jail's default user). Root, or one of them zero alone, is refused.
	// A host that is not root runs them as itself.
	UID, GID int
	// Bwrap is the bubblewrap that gives each package manager a mount
	// namespace holding only the system, its staging and cache directories
	// and the find-links directories; "" is bwrap on the PATH, "-" none.
	// Without a working one they run in the host's namespace.
	Bwrap string
}

// DefaultUID and DefaultGID are the installer's user on a root host: nobody,
// as the jail's (sandbox.DefaultUID).
const (
	DefaultUID = 65534
	DefaultGID = 65534
)

// Installed is an install ready to be mounted.
type Installed struct {
	Kind Kind
	// Key is the content key the install is cached under.
	Key string
	// Dir is the host directory to bind read-only into the jail.
	Dir string
	// Target is where to bind Dir in the jail: BunTarget or PipTarget.
	Target string
	// Env is what a jailed run adds to its environment: PYTHONPATH=Target
	// for pip, nothing for Bun (the mount point is found by Bun's lookup).
	Env []string
	// HostEnv replaces Env for an unjailed run, which sees Dir at its host
	// path: PYTHONPATH=Dir for pip, NODE_PATH=Dir for Bun (Bun honours
	// NODE_PATH for import, dynamic import and require of bare specifiers).
	HostEnv []string
}

// Installer installs packages into the cache. It is safe for concurrent use.
type Installer struct {
	o   Options
	log *zap.Logger
	as  installer // who the package managers run as, and their own directories

	flights singleflight.Group // by key: one install at a time in this process
	// installing holds the keys whose install has started, so that a caller can tell its job
	// log that it waits for another job's install: singleflight does not say whether a caller
	// joined a flight before the flight ends.
	installing sync.Map

	toolsMu sync.Mutex
	bun     *bunTool // probed on first use, kept once it worked
	pip     *pipTool

	installs atomic.Int64 // tool runs; tests check cache hits with it
}

// New checks the options and creates the cache directory. It does not probe
// bun or python: a host without one of them fails only the functions that
// need it.
func New(o Options) (*Installer, error) {
	if o.CacheDir == "" {
		return nil, errors.New("packages: Options.CacheDir is empty")
	}
	dir, err := filepath.Abs(o.CacheDir)
	if err != nil {
		return nil, fmt.Errorf("packages: cache directory: %w", err)
	}
	o.CacheDir = dir
	if o.Bun == "" {
		o.Bun = "bun"
	}
	if o.Python == "" {
		o.Python = "/usr/bin/python3"
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	// The kind directories hold the staging directories, which belong to the
	// installer's user while it runs: 0711 keeps their random names from being
	// listed by other processes of that uid, while the jail can still reach
	// the installs by their paths.
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{dir, 0o755}, {filepath.Join(dir, string(Bun)), 0o711}, {filepath.Join(dir, string(Pip)), 0o711}} {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return nil, fmt.Errorf("packages: create cache directory %s: %w", d.path, err)
		}
		// The jail's uid reads the installs; MkdirAll's mode is cut by the umask.
		if err := os.Chmod(d.path, d.mode); err != nil {
			return nil, fmt.Errorf("packages: cache directory %s: %w", d.path, err)
		}
	}
	as, err := newInstallerUser(dir, o.UID, o.GID)
	if err != nil {
		return nil, err
	}
	i := &Installer{o: o, log: o.Log.Named("packages")}
	if o.Bwrap != "-" {
		var findLinks []string
		for _, fl := range o.PipFindLinks {
			if filepath.IsAbs(fl) {
				findLinks = append(findLinks, fl)
			}
		}
		if err := as.useBwrap(or(o.Bwrap, "bwrap"), findLinks); err != nil {
			i.log.Warn("package managers run without a mount namespace of their own (as an unprivileged user on a root host, but able to read what any user may): bubblewrap is missing or does not work here",
				zap.Error(err))
		}
	}
	i.as = as
	i.warnUnreachable()
	return i, nil
}

// warnUnreachable warns when a jail running as another uid could not reach
// the cache (bwrap opens mount sources as that uid), or the package managers,
// which run as one too, the cache or a find-links directory.
func (i *Installer) warnUnreachable() {
	if os.Geteuid() != 0 {
		return
	}
	closed := func(dir string, read bool) string {
		if info, err := os.Stat(dir); err == nil && read && info.Mode().Perm()&0o005 != 0o005 {
			return dir
		}
		for d := dir; ; d = filepath.Dir(d) {
			if info, err := os.Stat(d); err == nil && info.Mode().Perm()&0o001 == 0 {
				return d
			}
			if d == filepath.Dir(d) {
				return ""
			}
		}
	}
	if d := closed(i.o.CacheDir, false); d != "" {
		i.log.Warn("jailed functions and the package managers cannot reach the package cache: a parent directory is closed to other users; chmod o+x it",
			zap.String("dir", d), zap.String("cache", i.o.CacheDir), zap.Int("installer_uid", i.as.uid))
	}
	for _, fl := range i.o.PipFindLinks {
		if !filepath.IsAbs(fl) {
			continue // a URL
		}
		if d := closed(fl, true); d != "" {
			i.log.Warn("pip, which runs as the installer's user, cannot read a --pip-find-links directory: a directory on the way is closed to other users; chmod o+rx it",
				zap.String("dir", d), zap.String("find_links", fl), zap.Int("installer_uid", i.as.uid))
		}
	}
}

func or(s, def string) string {
	if s != "" {
		return s
	}
	return def
}
