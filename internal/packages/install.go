package packages

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/gofrs/flock"
	"go.uber.org/zap"
)

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

	// A caller that comes while a flight starts up may not see its mark: its log then just
	// says nothing until the packages are ready.
	_, running := i.installing.Load(key)
	t0 := time.Now()
	if running {
		out.printf("waiting for the install of %s, started by another job (first run; cached afterwards)…", src.describe())
	}
	// DoChan runs the install in a goroutine of its own, which outlives a caller that gives up.
	flight := i.flights.DoChan(key, func() (any, error) {
		i.installing.Store(key, struct{}{})
		defer i.installing.Delete(key)
		return i.install(codeDir, src, key, out)
	})
	select {
	case r := <-flight:
		if r.Err != nil {
			return nil, r.Err
		}
		if running {
			out.printf("packages ready in %.1fs", time.Since(t0).Seconds())
		}
		return r.Val.(*Installed).clone(), nil
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
	l := flock.New(path, flock.SetFlag(os.O_CREATE|os.O_RDWR), flock.SetPermissions(0o644))
	ok, err := l.TryLock()
	if err == nil && !ok {
		onWait()
		ok, err = l.TryLockContext(ctx, 200*time.Millisecond)
	}
	if err != nil {
		return nil, err
	}
	if !ok { // TryLockContext ends with the lock, an error or ctx's
		return nil, errors.New("the lock was not taken")
	}
	return func() { l.Unlock() }, nil
}
