package host

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/deploy"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/jobs"
)

// A flow keeps the deployment it started under: its first job records the deployment this host
// serves, every message the host publishes for the flow carries it (HeaderDeployment), and a
// later step whose function differs in the deployment served now runs that deployment's
// version instead (pin), unless the function says `pin: latest`.

// setDeployment carries a job's deployment on a message published for its flow; signDeployment
// signs it once the message has its id and body.
func setDeployment(hdr nats.Header, rec *jobs.Record) {
	if rec != nil && rec.Deployment > 0 {
		hdr.Set(bus.HeaderDeployment, strconv.Itoa(rec.Deployment))
	}
}

// signDeployment signs m's Deployment header with the hosts' key, bound to its message id and
// body (ids.Key.DeploymentSig); m must have both. Without the header it does nothing.
func (h *Host) signDeployment(m *nats.Msg) {
	n := m.Header.Get(bus.HeaderDeployment)
	if n == "" {
		m.Header.Del(bus.HeaderDeploymentSig)
		return
	}
	m.Header.Set(bus.HeaderDeploymentSig, h.ids.DeploymentSig(m.Header.Get(bus.HeaderMsgID), n, m.Data))
}

// flowDeployment is the deployment a trigger's flow started under: its Deployment header when a
// host signed it for this very message, or for a flow's first job the one this host serves (0
// for a directory). An unsigned or forged header is a claim: ignored, and logged naming it.
func (h *Host) flowDeployment(hdr nats.Header, data []byte, fn string) int {
	claim := hdr.Get(bus.HeaderDeployment)
	if claim == "" {
		return h.deployment()
	}
	n, err := strconv.Atoi(claim)
	sig := hdr.Get(bus.HeaderDeploymentSig)
	if err == nil && n > 0 && ids.Verify(sig, h.ids.DeploymentSig(hdr.Get(bus.HeaderMsgID), claim, data)) {
		return n
	}
	h.log.Warn("ignored a Deployment header that no host signed for this message; the step runs the deployment served now",
		zap.String("function", fn), zap.String("msg_id", hdr.Get(bus.HeaderMsgID)), zap.String("claimed_deployment", truncate(claim, 40)),
		zap.Bool("signed", sig != ""), zap.Int("served", h.deployment()))
	return h.deployment()
}

// pinned caches what pinning reads: deployments (immutable once stored) and the versions
// materialised from them. Both are bounded, the least recently used dropped first: a dropped
// version is loaded again from <data>/versions, where it stays while a kept deployment names it
// (collectVersions).
type pinned struct {
	mu          sync.Mutex
	deployments map[int]*deploy.Deployment
	versions    map[string]*served // by data directory, function and hash: the version's fn and snapshot
	used        map[string]uint64  // when each of versions was last used, by tick
	tick        uint64
}

// Bounds of the pin caches: as many versions as a busy cluster's flows pin at once, and the
// deployments the retention keeps, twice over.
const (
	maxPinnedVersions    = 64
	maxCachedDeployments = 2 * deploy.KeepLast
)

var pins pinned // one per process: the versions are content-addressed, the same for every host

// pin makes a job run the version of its function that its flow's deployment holds, when that
// differs from what this host serves. A deployment no longer kept fails the step, naming it.
func (h *Host) pin(j *job) error {
	n := j.rec.Deployment
	if !h.cfg.Deployed || h.dep.store == nil || n == 0 || n == h.deployment() || j.s.fn.Spec.PinLatest {
		return nil
	}
	if j.msg.Headers().Get(bus.HeaderApprovalOf) != "" {
		return nil // a decision settles the waiting job; the steps it releases are pinned
	}
	ctx, cancel := context.WithTimeout(h.takeCtx, 5*time.Minute)
	defer cancel()
	d, err := pins.deployment(ctx, h.dep.store, n)
	if err != nil {
		return fmt.Errorf("this step's flow started under deployment %d, which is no longer kept (the last %d deployments and those younger than %v are): %w; start the flow again, or say `pin: latest` in %s to run the current code",
			n, deploy.KeepLast, deploy.KeepFor, err, j.s.fn.Name)
	}
	v, ok := d.Functions[j.s.fn.Name]
	if !ok || v.Hash == j.s.fn.Hash {
		return nil // the same code, or a function added since the flow began: what is served
	}
	s, err := h.pinnedVersion(ctx, j.s.fn.Name, v)
	if err != nil {
		return fmt.Errorf("this step's flow started under deployment %d, whose version %s of %s cannot be run here: %w", n, v.Hash, j.s.fn.Name, err)
	}
	h.log.Debug("running the version of the flow's deployment", zap.String("function", j.s.fn.Name), zap.Int("deployment", n),
		zap.String("version", v.Hash), zap.String("served", j.s.fn.Hash), zap.String("job_id", j.rec.ID))
	j.s = s
	j.rec.Version = s.fn.Hash
	return nil
}

func (p *pinned) deployment(ctx context.Context, st *deploy.Store, n int) (*deploy.Deployment, error) {
	p.mu.Lock()
	d, ok := p.deployments[n]
	p.mu.Unlock()
	if ok {
		return d, nil
	}
	d, err := st.Get(ctx, n)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.deployments == nil {
		p.deployments = map[int]*deploy.Deployment{}
	}
	if len(p.deployments) >= maxCachedDeployments {
		// The oldest number goes: flows of old deployments are the fewest.
		oldest := n
		for k := range p.deployments {
			oldest = min(oldest, k)
		}
		delete(p.deployments, oldest)
	}
	p.deployments[n] = d
	return d, nil
}

// version is the cached version under key, nil when none; it counts as used now.
func (p *pinned) version(key string) *served {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.versions[key]
	if ok {
		p.tick++
		p.used[key] = p.tick
	}
	return s
}

// keep caches s under key, dropping the least recently used version past maxPinnedVersions.
func (p *pinned) keep(key string, s *served) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.versions == nil {
		p.versions, p.used = map[string]*served{}, map[string]uint64{}
	}
	for len(p.versions) >= maxPinnedVersions {
		lru, at := "", uint64(0)
		for k, t := range p.used {
			if lru == "" || t < at {
				lru, at = k, t
			}
		}
		delete(p.versions, lru)
		delete(p.used, lru)
	}
	p.tick++
	p.versions[key], p.used[key] = s, p.tick
}

// forget drops the cached version under key.
func (p *pinned) forget(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.versions, key)
	delete(p.used, key)
}

func pinKey(dataDir, name, hash string) string { return dataDir + "|" + name + "@" + hash }

// collectVersions deletes the versions materialised under <data>/versions that no kept
// deployment names any more (the retention collected the deployments that did), and their
// cache entries. Jobs run from snapshots, not from there: a running pinned job keeps running.
func (h *Host) collectVersions(ctx context.Context) (int, error) {
	kept, err := h.dep.store.List(ctx)
	if err != nil {
		return 0, err
	}
	named := map[string]bool{}
	for _, d := range kept {
		for name, v := range d.Functions {
			named[name+"-"+v.Hash] = true
		}
	}
	root := filepath.Join(h.cfg.DataDir, "versions")
	entries, err := os.ReadDir(root)
	if err != nil {
		if os.IsNotExist(err) {
			return 0, nil
		}
		return 0, err
	}
	removed := 0
	for _, e := range entries {
		// ".tmp-" directories are versions being materialised; a name without a hash is
		// nobody's.
		name, hash, ok := cutVersionDir(e.Name())
		if !ok || named[e.Name()] {
			continue
		}
		pins.forget(pinKey(h.cfg.DataDir, name, hash))
		if err := os.RemoveAll(filepath.Join(root, e.Name())); err != nil {
			return removed, fmt.Errorf("collect %s: %w", filepath.Join(root, e.Name()), err)
		}
		removed++
	}
	return removed, nil
}

// cutVersionDir splits a version directory's name, <function>-<hash>.
func cutVersionDir(dir string) (name, hash string, ok bool) {
	if strings.HasPrefix(dir, ".") {
		return "", "", false
	}
	i := strings.LastIndexByte(dir, '-')
	if i <= 0 || i == len(dir)-1 {
		return "", "", false
	}
	return dir[:i], dir[i+1:], true
}

// pinnedVersion materialises a version once (data/versions/<fn>-<hash>), snapshots it and
// installs its packages, as a deployment's versions are before they are served.
func (h *Host) pinnedVersion(ctx context.Context, name string, v deploy.Version) (*served, error) {
	key := pinKey(h.cfg.DataDir, name, v.Hash)
	if s := pins.version(key); s != nil {
		return s, nil
	}
	f, err := h.dep.store.Function(ctx, name, v, filepath.Join(h.cfg.DataDir, "versions"))
	if err != nil {
		return nil, err
	}
	if err := h.prepare(ctx, map[string]*functions.Function{name: f}); err != nil {
		return nil, err
	}
	codeDir, err := f.Snapshot(filepath.Join(h.cfg.DataDir, "functions"), h.cfg.SnapshotGroup)
	if err != nil {
		return nil, err
	}
	s := &served{fn: f, codeDir: codeDir}
	pins.keep(key, s)
	return s, nil
}
