package host

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/deploy"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/jobs"
)

// A flow keeps the deployment it started under: its first job records the deployment this host
// serves, every message the host publishes for the flow carries it (HeaderDeployment), and a
// later step whose function differs in the deployment served now runs that deployment's
// version instead (pin), unless the function says `pin: latest`.

// setDeployment carries a job's deployment on a message published for its flow.
func setDeployment(hdr nats.Header, rec *jobs.Record) {
	if rec != nil && rec.Deployment > 0 {
		hdr.Set(bus.HeaderDeployment, strconv.Itoa(rec.Deployment))
	}
}

// flowDeployment is the deployment a trigger's flow started under: its header's, or for a
// flow's first job the one this host serves (0 for a directory).
func (h *Host) flowDeployment(hdr nats.Header) int {
	if n, err := strconv.Atoi(hdr.Get(bus.HeaderDeployment)); err == nil && n > 0 {
		return n
	}
	return h.deployment()
}

// pinned caches what pinning reads: deployments (immutable once stored) and the versions
// materialised from them.
type pinned struct {
	mu          sync.Mutex
	deployments map[int]*deploy.Deployment
	versions    map[string]*served // by function and hash: the version's fn and snapshot
}

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
	p.deployments[n] = d
	return d, nil
}

// pinnedVersion materialises a version once (data/versions/<fn>-<hash>), snapshots it and
// installs its packages, as a deployment's versions are before they are served.
func (h *Host) pinnedVersion(ctx context.Context, name string, v deploy.Version) (*served, error) {
	key := h.cfg.DataDir + "|" + name + "@" + v.Hash
	pins.mu.Lock()
	s, ok := pins.versions[key]
	pins.mu.Unlock()
	if ok {
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
	s = &served{fn: f, codeDir: codeDir}
	pins.mu.Lock()
	defer pins.mu.Unlock()
	if pins.versions == nil {
		pins.versions = map[string]*served{}
	}
	pins.versions[key] = s
	return s, nil
}
