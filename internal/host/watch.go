package host

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

// settle is how long the functions directory must be quiet before a reload: editors write a
// file in several steps, and a reload per step would serve half-written code.
const settle = 150 * time.Millisecond

// Retries of a reload that left functions unserved: the first after unservedRetry, each next
// one twice as late, up to unservedRetryMax.
const (
	unservedRetry    = time.Second
	unservedRetryMax = 30 * time.Second
)

// watch reloads the functions when anything under the functions directory changes, and, while
// some could not be served (their consumer or snapshot failed: NATS slow or away, a full disk),
// again and again until they are.
func (h *Host) watch() error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", h.cfg.FunctionsDir, err)
	}
	if err := addTree(w, h.cfg.FunctionsDir); err != nil {
		w.Close()
		return fmt.Errorf("watch %s: %w", h.cfg.FunctionsDir, err)
	}
	h.watchWG.Add(1)
	go func() {
		defer h.watchWG.Done()
		defer w.Close()
		var timer <-chan time.Time
		retry := unservedRetry
		// again arms the timer for a retry while functions are unserved, or the reload
		// failed (failed: its error).
		again := func(failed error) {
			n := h.unservedCount()
			if n == 0 && failed == nil {
				retry = unservedRetry
				return
			}
			h.log.Warn("functions not served yet; trying again", zap.Int("unserved", n), zap.NamedError("reload", failed), zap.Duration("in", retry))
			timer = time.After(retry)
			retry = min(2*retry, unservedRetryMax)
		}
		again(nil)
		for {
			select {
			case <-h.takeCtx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if ev.Has(fsnotify.Create) {
					// A new function folder must be watched too.
					if st, err := os.Stat(ev.Name); err == nil && st.IsDir() {
						_ = addTree(w, ev.Name)
					}
				}
				timer = time.After(settle)
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				h.log.Warn("watching the functions directory", zap.Error(err))
			case <-timer:
				timer = nil
				ctx, cancel := context.WithTimeout(h.takeCtx, time.Minute)
				err := h.reload(ctx)
				if err != nil {
					h.log.Error("reload failed; the previous functions keep serving", zap.Error(err))
				}
				cancel()
				again(err)
			}
		}
	}()
	return nil
}

// addTree watches dir and its sub-directories, except installed packages.
func addTree(w *fsnotify.Watcher, dir string) error {
	return filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if p != dir && (d.Name() == "node_modules" || d.Name() == "__pycache__" || d.Name()[0] == '.') {
			return filepath.SkipDir
		}
		return w.Add(p)
	})
}

func (h *Host) unservedCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.unserved
}
