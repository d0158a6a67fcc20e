package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/deploy"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/runtimes"
)

// Refusal is a function file this host does not serve as it is: `host functions` and the
// dashboard show it with its error.
//
//	function  the function it defines ("" when even that could not be told)
//	file      the file or folder refused
//	error     why, naming the file and line where known
//	kept      the version still served instead (the last good one), "" when none is
type Refusal struct {
	Function string `json:"function"`
	File     string `json:"file"`
	Error    string `json:"error"`
	Kept     string `json:"kept,omitempty"`
}

// deployState is what the host serves from: a directory, or a deployment materialised into
// one (serve --deployed), and what it refused there.
type deployState struct {
	mu       sync.Mutex
	dir      string // "" until set: the functions directory
	number   int    // the deployment served; 0 for a directory
	refusals []Refusal
	// announcedRefused are the functions this host announced only as refused, to withdraw
	// once they are served or gone.
	announcedRefused map[string]bool
	// checked caches Config.Check by function and content hash: checking spawns a compiler.
	checked map[string]error
	store   *deploy.Store
	// switchErr is why the last switch to the current deployment failed; "" once it is served.
	switchErr string
}

// Preparer is a Runner that installs a function version's packages ahead of its first job
// (*runner.Runner is one): a host switching to a deployment installs first, then switches.
type Preparer interface {
	Prepare(ctx context.Context, f *functions.Function, codeDir string) error
}

func (h *Host) functionsDir() string {
	h.dep.mu.Lock()
	defer h.dep.mu.Unlock()
	if h.dep.dir == "" {
		return h.cfg.FunctionsDir
	}
	return h.dep.dir
}

// FunctionsDir is the directory this host serves its functions from now: its functions
// directory, or under Config.Deployed the current deployment as materialised (which changes
// with each deploy). The web face and /mcp read annotations and tools from it.
func (h *Host) FunctionsDir() string { return h.functionsDir() }

// deployment is the number of the deployment served, 0 when serving a directory.
func (h *Host) deployment() int {
	h.dep.mu.Lock()
	defer h.dep.mu.Unlock()
	return h.dep.number
}

// switchError is why this host could not switch to the current deployment, "" when it serves it.
func (h *Host) switchError() string {
	h.dep.mu.Lock()
	defer h.dep.mu.Unlock()
	return h.dep.switchErr
}

// noteSwitch keeps why a switch failed (err nil: it succeeded) and, when that changed, says so
// in every served function's announcement: `host functions` shows it.
func (h *Host) noteSwitch(ctx context.Context, err error) {
	msg := ""
	if err != nil {
		msg = elide(err.Error(), maxSwitchError)
	}
	h.dep.mu.Lock()
	changed := h.dep.switchErr != msg
	h.dep.switchErr = msg
	h.dep.mu.Unlock()
	if !changed {
		return
	}
	for _, s := range h.servedSnapshot() {
		h.announce(ctx, s)
	}
}

// maxSwitchError bounds the switch error each presence entry carries: an installer's output
// can be long; its start says what failed and its end why.
const maxSwitchError = 1500

// elide keeps s's first and last bytes when it is longer than n.
func elide(s string, n int) string {
	if len(s) <= n {
		return s
	}
	head := truncateUTF8(s, n/3)
	tail := s[len(s)-(n-len(head)-5):]
	for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
		tail = tail[1:]
	}
	return head + " ... " + tail
}

// Refusals are the files the last load refused.
func (h *Host) Refusals() []Refusal {
	h.dep.mu.Lock()
	defer h.dep.mu.Unlock()
	return append([]Refusal(nil), h.dep.refusals...)
}

// Deployment is the number of the deployment this host serves; 0 when it serves a directory.
func (h *Host) Deployment() int { return h.deployment() }

func (h *Host) refusalOf(name string) string {
	h.dep.mu.Lock()
	defer h.dep.mu.Unlock()
	for _, r := range h.dep.refusals {
		if r.Function == name {
			return r.Error
		}
	}
	return ""
}

// servedFn is the version of name this host serves, nil when none.
func (h *Host) servedFn(name string) *functions.Function {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s, ok := h.served[name]; ok {
		return s.fn
	}
	return nil
}

// refusal tells which function a refused file defines: the file's name in dir, or the folder
// it lies in.
func refusal(dir string, err error) Refusal {
	r := Refusal{Error: err.Error()}
	var fe *functions.Error
	if !errors.As(err, &fe) {
		return r
	}
	r.File = fe.Path
	rel, relErr := filepath.Rel(dir, fe.Path)
	if relErr != nil || strings.HasPrefix(rel, "..") {
		return r
	}
	top, _, _ := strings.Cut(filepath.ToSlash(rel), "/")
	name := strings.TrimSuffix(top, filepath.Ext(top))
	if functions.CheckName(name) == nil {
		r.Function = name
	}
	return r
}

// checkAll refuses, and takes out of fns, the functions Config.Check refuses. A check that
// could not run (its tool missing) refuses nothing: that is the host's trouble, not the file's,
// and it is logged.
func (h *Host) checkAll(ctx context.Context, fns map[string]*functions.Function) []error {
	if h.cfg.Check == nil {
		return nil
	}
	var errs []error
	for name, f := range fns {
		key := name + "@" + f.Hash
		h.dep.mu.Lock()
		err, done := h.dep.checked[key]
		h.dep.mu.Unlock()
		if !done {
			err = h.cfg.Check(ctx, f)
			var def *runtimes.DefinitionError
			if err != nil && !errors.As(err, &def) {
				h.log.Warn("cannot check a function the way `host check` does; serving it unchecked", zap.String("function", name), zap.Error(err))
				continue
			}
			h.dep.mu.Lock()
			if h.dep.checked == nil {
				h.dep.checked = map[string]error{}
			}
			h.dep.checked[key] = err
			h.dep.mu.Unlock()
		}
		if err != nil {
			errs = append(errs, &functions.Error{Path: f.Root, Err: err})
			delete(fns, name)
		}
	}
	return errs
}

// noteRefusals keeps what was refused and the deployment served, and says so in the host's
// announcements: a kept version's entry carries the refusal, a refused function served in no
// version gets an entry of its own (no version, the refusal), withdrawn once that is over.
func (h *Host) noteRefusals(ctx context.Context, refusals []Refusal, deployment int) {
	h.dep.mu.Lock()
	h.dep.refusals = refusals
	h.dep.number = deployment
	before := h.dep.announcedRefused
	h.dep.announcedRefused = map[string]bool{}
	h.dep.mu.Unlock()
	for _, s := range h.servedSnapshot() {
		h.announce(ctx, s)
	}
	if h.presence == nil {
		return
	}
	for _, r := range refusals {
		if r.Function == "" || r.Kept != "" {
			continue
		}
		a := presenceRefusal(h.cfg.HostID, deployment, r)
		if err := h.presence.Announce(ctx, r.Function, a); err != nil {
			h.log.Debug("cannot announce a refused function", zap.String("function", r.Function), zap.Error(err))
		}
		h.dep.mu.Lock()
		h.dep.announcedRefused[r.Function] = true
		h.dep.mu.Unlock()
		delete(before, r.Function)
	}
	for name := range before {
		if h.servedFn(name) != nil {
			continue // its served version's entry replaced the refusal
		}
		if err := h.presence.Withdraw(ctx, name, h.cfg.HostID); err != nil {
			h.log.Debug("cannot withdraw a refused function's entry", zap.String("function", name), zap.Error(err))
		}
	}
}

// startServing serves the functions directory, or with Config.Deployed the current deployment.
func (h *Host) startServing(ctx context.Context) error {
	if !h.cfg.Deployed {
		return h.reload(ctx)
	}
	st, err := deploy.Open(ctx, h.js, h.cfg.Streams.Replicas)
	if err != nil {
		return err
	}
	h.dep.store = st
	// Until something is deployed the host serves an empty directory of its own.
	empty := filepath.Join(h.cfg.DataDir, "deployments", "none")
	if err := os.MkdirAll(empty, 0o750); err != nil {
		return fmt.Errorf("make %s: %w", empty, err)
	}
	h.dep.mu.Lock()
	h.dep.dir = empty
	h.dep.mu.Unlock()
	d, err := st.Current(ctx)
	if errors.Is(err, deploy.ErrNone) {
		h.log.Warn("nothing is deployed yet: this host serves no function until `host deploy` stores one")
		return h.reload(ctx)
	}
	if err == nil {
		err = h.switchTo(ctx, d)
	}
	if err != nil {
		// The watch tries again; meanwhile the host is up, serving nothing.
		h.noteSwitch(ctx, err)
		h.log.Error("cannot serve the current deployment; trying again", zap.Error(err))
		return h.reload(ctx)
	}
	return nil
}

// switchTo serves deployment d: it is materialised, loaded and checked, its new versions
// snapshotted and their packages installed, and only then served. Any failure leaves the
// served set as it was.
func (h *Host) switchTo(ctx context.Context, d *deploy.Deployment) error {
	began := time.Now()
	root := filepath.Join(h.cfg.DataDir, "deployments")
	dir, err := h.dep.store.Materialise(ctx, d, root)
	if err != nil {
		return fmt.Errorf("deployment %d not served, deployment %d still is: %w", d.Number, h.deployment(), err)
	}
	fns, refusals := h.load(ctx, dir)
	if err := h.prepare(ctx, fns); err != nil {
		return fmt.Errorf("deployment %d not served, deployment %d still is: %w", d.Number, h.deployment(), err)
	}
	prevDir := h.functionsDir()
	h.dep.mu.Lock()
	h.dep.dir = dir
	h.dep.mu.Unlock()
	if err := h.apply(ctx, fns, refusals, d.Number); err != nil {
		return err
	}
	h.log.Info("serving deployment", zap.Int("deployment", d.Number), zap.String("by", d.By), zap.String("message", d.Message),
		zap.Int("functions", len(fns)), zap.Int("refused", len(refusals)), zap.Duration("took", time.Since(began)))
	if prevDir != dir && filepath.Dir(prevDir) == root && filepath.Base(prevDir) != "none" {
		// Jobs run from snapshots, not from here: the old directory is only a cache.
		_ = os.RemoveAll(prevDir)
	}
	// A deploy may have collected old deployments: their pinned versions go with them.
	if n, err := h.collectVersions(ctx); err != nil {
		h.log.Warn("cannot collect the pinned versions no kept deployment names; tried again at the next deployment", zap.Error(err))
	} else if n > 0 {
		h.log.Info("collected pinned versions no kept deployment names", zap.Int("versions", n))
	}
	return nil
}

// prepare snapshots the versions of fns not served yet and installs their packages.
func (h *Host) prepare(ctx context.Context, fns map[string]*functions.Function) error {
	p, _ := h.runner.(Preparer)
	for name, f := range fns {
		if s := h.servedFn(name); s != nil && s.Hash == f.Hash {
			continue
		}
		codeDir, err := f.Snapshot(filepath.Join(h.cfg.DataDir, "functions"), h.cfg.SnapshotGroup)
		if err != nil {
			return err
		}
		if p == nil {
			continue
		}
		if err := p.Prepare(ctx, f, codeDir); err != nil {
			return fmt.Errorf("install the packages of %s: %w", name, err)
		}
	}
	return nil
}

// follow keeps the served set current: a directory is watched for edits, a deployment's
// current key for new deployments.
func (h *Host) follow() error {
	if !h.cfg.Deployed {
		return h.watch()
	}
	updates, err := h.dep.store.Watch(h.takeCtx)
	if err != nil {
		return err
	}
	h.watchWG.Add(1)
	go func() {
		defer h.watchWG.Done()
		h.followDeployments(updates)
	}()
	return nil
}

// followDeployments switches to each new current deployment; one that fails (its packages do
// not install, an object is corrupt) is tried again, later each time, while the last good one
// keeps serving.
func (h *Host) followDeployments(updates <-chan int) {
	want := 0
	var retry <-chan time.Time
	delay := unservedRetry
	try := func() {
		retry = nil
		if want != 0 && want != h.deployment() {
			ctx, cancel := context.WithTimeout(h.takeCtx, 10*time.Minute)
			defer cancel()
			d, err := h.dep.store.Get(ctx, want)
			if err == nil {
				err = h.switchTo(ctx, d)
			}
			h.noteSwitch(ctx, err)
			if err != nil {
				h.log.Error("cannot serve the new deployment; the last one keeps serving, and it is tried again", zap.Int("deployment", want), zap.Duration("in", delay), zap.Error(err))
				retry = time.After(delay)
				delay = min(2*delay, unservedRetryMax)
				return
			}
		} else if h.unservedCount() > 0 {
			ctx, cancel := context.WithTimeout(h.takeCtx, time.Minute)
			err := h.reload(ctx)
			cancel()
			if err != nil || h.unservedCount() > 0 {
				retry = time.After(delay)
				delay = min(2*delay, unservedRetryMax)
				return
			}
		}
		delay = unservedRetry
	}
	for {
		select {
		case <-h.takeCtx.Done():
			return
		case n, ok := <-updates:
			if !ok {
				return
			}
			want = n
			delay = unservedRetry
			try()
		case <-retry:
			try()
		}
	}
}

// DeploymentLabel is how listings name what a host serves: "deployment 3", or "directory".
func DeploymentLabel(n int) string {
	if n == 0 {
		return "directory"
	}
	return "deployment " + strconv.Itoa(n)
}

// refusedText is what a call of a function served nowhere adds when a host refuses its file:
// "; its file is refused: <error>", the file and line named; "" when none does.
func (h *Host) refusedText(ctx context.Context, name string) string {
	if r := h.refusalOf(name); r != "" {
		return "; its file is refused: " + r
	}
	if h.presence == nil {
		return ""
	}
	entries, err := h.presence.List(ctx, name)
	if err != nil {
		return ""
	}
	for _, e := range entries {
		if e.Refused != "" {
			return "; its file is refused on host " + e.Host + ": " + e.Refused
		}
	}
	return ""
}
