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
//     only (see CheckManifests): file:/host/dir, link:, -r /etc/shadow and the
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
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
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

	mu      sync.Mutex
	flights map[string]*flight // key -> install under way in this process

	toolsMu sync.Mutex
	bun     *bunTool // probed on first use, kept once it worked
	pip     *pipTool

	installs atomic.Int64 // tool runs; tests check cache hits with it
}

type flight struct {
	done chan struct{}
	inst *Installed
	err  error
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
	i := &Installer{o: o, log: o.Log.Named("packages"), flights: map[string]*flight{}}
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

// Needs reports whether the function whose code is in codeDir, with entry
// file entry (relative to codeDir), needs packages, and from which manager:
//
//   - .py entries need pip when codeDir/requirements.txt names at least one
//     requirement. The content key is requirements.txt, the python version
//     and platform, pip's version, and the index and find-links options (a
//     find-links directory counts by its path, not its content), and the
//     wheels inside codeDir that it names.
//   - .ts .tsx .mts .cts .js .jsx .mjs .cjs entries need Bun when
//     codeDir/package.json declares dependencies (or optionalDependencies);
//     the key is package.json, bun.lock or bun.lockb if present, the local
//     folders and tarballs inside codeDir that they name, and Bun's version.
//     Without a package.json, or with one declaring no dependency,
//     they need Bun when the entry, or a local module it imports, has a bare
//     import that is not a built-in: Bun's transpiler finds the imports and
//     Bun lists its built-ins (see scan.mjs and packageName). A file that
//     does not parse is then an error naming it, its line and column, that
//     wraps a *runtimes.DefinitionError (no retry can fix it). The packages are then
//     installed at "latest" and the key holds only their names and Bun's
//     version: the first install pins them until the cache is cleared, and a
//     package.json is the way to choose or upgrade versions.
//
// The registry in use (Options.NpmRegistry, PipIndexURL) is part of every key.
// Needs scans with the bun on the PATH.
func Needs(codeDir, entry string) (need bool, kind Kind, err error) {
	s, err := inspect(context.Background(), bunOnPath, codeDir, entry)
	if err != nil || s == nil {
		return false, "", err
	}
	return true, s.kind, nil
}

// source is what a function needs installed, read from its code folder.
type source struct {
	kind  Kind
	pkgs  []string          // names, for messages (and the key of generated installs)
	files map[string][]byte // files to write into the install directory
	// locals are the paths inside the function folder (relative, cleaned) that the
	// manifests name as sources: copied into the install directory, and hashed into the key.
	locals   []string
	declared bool // bun: package.json from the function folder
}

func (s *source) describe() string {
	what := "npm packages"
	if s.kind == Pip {
		what = "Python packages"
	}
	names := strings.Join(s.pkgs, ", ")
	if len(names) > 200 {
		names = names[:200] + "…"
	}
	return what + " " + names
}

func inspect(ctx context.Context, bun bunLocator, codeDir, entry string) (*source, error) {
	if entry == "" {
		return nil, errors.New("packages: no entry file given")
	}
	path := filepath.Join(codeDir, entry)
	if ok, err := fileExists(path); err != nil || !ok {
		if err == nil {
			err = fs.ErrNotExist
		}
		return nil, fmt.Errorf("packages: entry file %s: %w", path, err)
	}
	switch {
	case strings.EqualFold(filepath.Ext(entry), ".py"):
		return inspectPip(codeDir)
	case isJS(entry):
		return inspectBun(ctx, bun, codeDir, entry)
	}
	return nil, nil
}

// Ensure makes the packages of a function available and returns where they
// are, or nil when the function needs none (see Needs). The first call for a
// content key installs; later calls, in this process or another sharing
// CacheDir, get the cached result. Callers of a key under install wait for it.
//
// logf receives progress lines meant for the job's log: that an install is
// starting or awaited (so a slow first run says why), the package manager's
// output, and how long it took. It is not called on a cache hit.
//
// The install itself is detached from ctx: a caller that gives up (ctx done)
// returns at once, while the install runs on, bounded by Options.Timeout, and
// is cached for the next run.
func (i *Installer) Ensure(ctx context.Context, codeDir, entry string, logf func(format string, args ...any)) (*Installed, error) {
	src, err := inspect(ctx, i.bunPath, codeDir, entry)
	if err != nil || src == nil {
		return nil, err
	}
	key, err := i.key(ctx, codeDir, src)
	if err != nil {
		return nil, err
	}
	if inst := i.lookup(src.kind, key); inst != nil {
		return inst, nil
	}
	out := &jobLog{f: logf}

	i.mu.Lock()
	f, running := i.flights[key]
	if !running {
		f = &flight{done: make(chan struct{})}
		i.flights[key] = f
	}
	i.mu.Unlock()
	t0 := time.Now()
	if running {
		out.printf("waiting for the install of %s, started by another job (first run; cached afterwards)…", src.describe())
	} else {
		go func() {
			f.inst, f.err = i.install(codeDir, src, key, out)
			i.mu.Lock()
			delete(i.flights, key)
			i.mu.Unlock()
			close(f.done)
		}()
	}
	select {
	case <-f.done:
		if f.err != nil {
			return nil, f.err
		}
		if running {
			out.printf("packages ready in %.1fs", time.Since(t0).Seconds())
		}
		return f.inst.clone(), nil
	case <-ctx.Done():
		out.detach()
		return nil, fmt.Errorf("waiting for %s to install: %w (the install goes on: if it succeeds, the next run finds it cached)", src.describe(), ctx.Err())
	}
}

func (in *Installed) clone() *Installed {
	c := *in
	c.Env = append([]string(nil), in.Env...)
	c.HostEnv = append([]string(nil), in.HostEnv...)
	return &c
}

// jobLog forwards progress lines to a caller's logf until the caller stops
// listening: the install may outlive the job that started it.
type jobLog struct {
	mu       sync.Mutex
	f        func(string, ...any)
	detached bool
}

func (l *jobLog) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil && !l.detached {
		l.f(format, args...)
	}
}

func (l *jobLog) detach() {
	l.mu.Lock()
	l.detached = true
	l.mu.Unlock()
}

// key hashes everything that determines an install's result.
func (i *Installer) key(ctx context.Context, codeDir string, s *source) (string, error) {
	h := sha256.New()
	field := func(parts ...string) {
		for _, p := range parts {
			// Length-prefixed, so that no two field lists hash alike.
			var n [8]byte
			binary.BigEndian.PutUint64(n[:], uint64(len(p)))
			h.Write(n[:])
			io.WriteString(h, p)
		}
	}
	switch s.kind {
	case Bun:
		tool, err := i.bunTool(ctx)
		if err != nil {
			return "", err
		}
		field("bun", bunLayout, tool.version, i.o.NpmRegistry)
	case Pip:
		tool, err := i.pipTool(ctx)
		if err != nil {
			return "", err
		}
		field("pip", pipLayout, tool.python, tool.pipVersion, i.o.PipIndexURL)
		field(i.o.PipFindLinks...)
	}
	if s.declared || s.kind == Pip {
		for _, name := range sortedKeys(s.files) {
			field(name, string(s.files[name]))
		}
	} else {
		field(s.pkgs...) // the generated package.json follows from the names
	}
	for _, rel := range s.locals {
		sum, err := hashLocal(codeDir, rel)
		if err != nil {
			return "", fmt.Errorf("packages: %w", err)
		}
		field("local", rel, sum)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Cache layout: <CacheDir>/<kind>/<key>/ holds the install (node_modules/ or
// site/), the inputs it was made from, and completeMarker, written last.
const (
	completeMarker = ".complete"
	tmpPrefix      = ".tmp-"
)

func (i *Installer) finalDir(kind Kind, key string) string {
	return filepath.Join(i.o.CacheDir, string(kind), key)
}

// lookup returns the cached install of key, or nil.
func (i *Installer) lookup(kind Kind, key string) *Installed {
	dir := i.finalDir(kind, key)
	if ok, _ := fileExists(filepath.Join(dir, completeMarker)); !ok {
		return nil
	}
	switch kind {
	case Bun:
		nm := filepath.Join(dir, "node_modules")
		return &Installed{Kind: Bun, Key: key, Dir: nm, Target: BunTarget, HostEnv: []string{"NODE_PATH=" + nm}}
	case Pip:
		site := filepath.Join(dir, "site")
		return &Installed{Kind: Pip, Key: key, Dir: site, Target: PipTarget,
			Env: []string{"PYTHONPATH=" + PipTarget}, HostEnv: []string{"PYTHONPATH=" + site}}
	}
	return nil
}

// install runs one install of key, holding the cross-process lock.
func (i *Installer) install(codeDir string, src *source, key string, out *jobLog) (*Installed, error) {
	what := src.describe()
	ctx, cancel := context.WithTimeout(context.Background(), i.o.Timeout)
	defer cancel()
	t0 := time.Now()
	final := i.finalDir(src.kind, key)

	waited := false
	unlock, err := lockFile(ctx, final+".lock", func() {
		waited = true
		out.printf("another host process is installing %s (first run; cached afterwards); waiting…", what)
	})
	if err != nil {
		return nil, i.failed(ctx, what, fmt.Errorf("lock the package cache: %w", err))
	}
	defer unlock()
	if inst := i.lookup(src.kind, key); inst != nil {
		// Installed meanwhile, by another process or by a flight of this
		// one that ended between Ensure's lookup and this flight's start.
		if waited {
			out.printf("packages ready in %.1fs", time.Since(t0).Seconds())
		}
		return inst, nil
	}

	// Leftovers of an install that died (crash, kill) before its rename.
	stale, _ := filepath.Glob(filepath.Join(i.o.CacheDir, string(src.kind), tmpPrefix+key+"-*"))
	for _, d := range stale {
		os.RemoveAll(d)
	}
	if err := os.RemoveAll(final); err != nil { // incomplete, or it would have been found
		return nil, i.failed(ctx, what, err)
	}

	out.printf("installing %s (first run; cached afterwards)…", what)
	i.log.Info("installing packages", zap.String("kind", string(src.kind)), zap.String("key", key), zap.Strings("packages", src.pkgs))
	tmp, err := os.MkdirTemp(filepath.Join(i.o.CacheDir, string(src.kind)), tmpPrefix+key+"-")
	if err != nil {
		return nil, i.failed(ctx, what, err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	for name, b := range src.files {
		if err := os.WriteFile(filepath.Join(tmp, name), b, 0o644); err != nil {
			return nil, i.failed(ctx, what, err)
		}
	}
	for _, rel := range src.locals {
		if err := copyLocal(codeDir, rel, tmp); err != nil {
			return nil, i.failed(ctx, what, fmt.Errorf("copy the function's %s into the install: %w", rel, err))
		}
	}
	// The installer writes into tmp, and only there; the files just written stay the host's.
	if err := i.as.handOver(tmp); err != nil {
		return nil, i.failed(ctx, what, err)
	}

	i.installs.Add(1)
	switch src.kind {
	case Bun:
		err = i.runBun(ctx, tmp, out)
	case Pip:
		err = i.runPip(ctx, tmp, out)
	}
	if err != nil {
		return nil, i.failed(ctx, what, err)
	}
	if err := i.as.seal(tmp); err != nil {
		return nil, i.failed(ctx, what, fmt.Errorf("take the install back from the installer: %w", err))
	}
	manifest, _ := json.MarshalIndent(map[string]any{
		"kind": src.kind, "packages": src.pkgs, "installed": time.Now().UTC(),
		"seconds": time.Since(t0).Seconds(),
	}, "", "  ")
	if err := os.WriteFile(filepath.Join(tmp, completeMarker), manifest, 0o644); err != nil {
		return nil, i.failed(ctx, what, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return nil, i.failed(ctx, what, fmt.Errorf("move the install into place: %w", err))
	}
	d := time.Since(t0)
	i.log.Info("packages installed", zap.String("kind", string(src.kind)), zap.String("key", key), zap.Duration("took", d))
	out.printf("packages ready in %.1fs", d.Seconds())
	inst := i.lookup(src.kind, key)
	if inst == nil {
		return nil, i.failed(ctx, what, errors.New("the install vanished from the cache right after it was made"))
	}
	return inst, nil
}

// failed wraps an install error with what failed and that it is retried.
func (i *Installer) failed(ctx context.Context, what string, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("timed out after %v (raise the install timeout, or check that the package index is reachable): %w", i.o.Timeout, err)
	}
	i.log.Warn("package install failed", zap.String("packages", what), zap.Error(err))
	return fmt.Errorf("install %s: %w; nothing was cached: the next run will try again", what, err)
}

// lockFile takes an exclusive flock on path, polling so that ctx can end the
// wait; onWait is called once if the lock is busy.
func lockFile(ctx context.Context, path string, onWait func()) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for waited := false; ; {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, err
		}
		if !waited {
			waited = true
			onWait()
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// run starts a package manager with env in dir, sends its output lines to
// out (the first maxForward) and the zap log, and on failure returns an
// error quoting its last stderr lines.
func (i *Installer) run(ctx context.Context, name string, argv, env []string, dir string, out *jobLog) error {
	wrapped := i.as.wrap(argv, dir)
	cmd := exec.CommandContext(ctx, wrapped[0], wrapped[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	// Its own process group, so that a timeout kills the children too, and
	// SIGKILL if the host dies, so that no orphan writes into the cache.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: i.as.cred}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	i.log.Debug("running package manager", zap.Strings("argv", i.scrubAll(argv)), zap.String("dir", dir))
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s as %s: %w%s", name, i.as, err, i.as.hint())
	}
	// Whatever the tool left behind in its group goes before the host takes the tree back
	// (seal): nothing of the installer's user may still be writing into it.
	defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	tail := &lineTail{max: 12}
	var forwarded atomic.Int32
	var wg sync.WaitGroup
	pump := func(r io.Reader, keep bool) {
		defer wg.Done()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := i.scrub(strings.TrimRight(sc.Text(), "\r"))
			if strings.TrimSpace(line) == "" {
				continue
			}
			if keep {
				tail.add(line)
			}
			i.log.Debug(name, zap.String("line", line))
			switch n := forwarded.Add(1); {
			case n <= maxForward:
				out.printf("  %s", line)
			case n == maxForward+1:
				out.printf("  … (more %s output in the host log at debug level)", name)
			}
		}
		io.Copy(io.Discard, r) // a line over the scanner's limit: drain, do not block the tool
	}
	wg.Add(2)
	go pump(stdout, false)
	go pump(stderr, true)
	wg.Wait()
	err = cmd.Wait()
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s was killed: %w", name, ctx.Err())
	}
	msg := tail.String()
	if msg == "" {
		msg = "(no error output)"
	}
	return fmt.Errorf("%s failed (%v): %s%s", name, err, msg, i.as.deniedHint(msg))
}

// maxForward bounds the package manager lines copied into a job's log.
const maxForward = 60

type lineTail struct {
	mu    sync.Mutex
	max   int
	lines []string
}

func (t *lineTail) add(l string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == t.max {
		t.lines = t.lines[1:]
	}
	t.lines = append(t.lines, l)
}

// String joins the error lines (and notes) of the tail, or all of it when
// none says "error": progress lines ("Resolving dependencies") only hide the
// cause.
func (t *lineTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var errs []string
	for _, l := range t.lines {
		if ll := strings.ToLower(l); strings.Contains(ll, "error") || strings.HasPrefix(ll, "note:") || strings.HasPrefix(ll, "hint:") {
			errs = append(errs, l)
		}
	}
	if len(errs) == 0 {
		errs = t.lines
	}
	return strings.Join(errs, " | ")
}

// scrub hides the password of a configured registry or index URL in text
// meant for logs and errors.
func (i *Installer) scrub(s string) string {
	for _, raw := range append([]string{i.o.NpmRegistry, i.o.PipIndexURL}, i.o.PipFindLinks...) {
		u, err := url.Parse(raw)
		if err != nil || u.User == nil {
			continue
		}
		if p, ok := u.User.Password(); ok && p != "" {
			s = strings.ReplaceAll(s, p, "xxxxx")
		} else if n := u.User.Username(); n != "" {
			s = strings.ReplaceAll(s, n+"@", "xxxxx@") // a token as user name
		}
	}
	return s
}

func (i *Installer) scrubAll(argv []string) []string {
	out := make([]string, len(argv))
	for k, a := range argv {
		out[k] = i.scrub(a)
	}
	return out
}

// toolEnv is the environment of a package manager: no variable of the host
// (a PIP_* or npm_config_* there would change an install without changing
// its key), except what reaching the network needs.
func (i *Installer) toolEnv(extra ...string) []string {
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + i.as.home(),
		// Temporary files in the installer's own directory, not in a /tmp shared with others.
		"TMPDIR=" + i.as.tmp(),
		"LANG=C.UTF-8",
		"NO_COLOR=1",
		"DO_NOT_TRACK=1",
	}
	for _, k := range []string{
		"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy", "all_proxy",
		"SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT",
	} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return append(env, extra...)
}

func or(s, def string) string {
	if s != "" {
		return s
	}
	return def
}

func sortedKeys(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
