package host

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
)

// EmbeddedStore is the JetStream store of the NATS server the host embeds: whether it refuses
// writes, and starting JetStream again once it can write (bus.EmbeddedStore).
type EmbeddedStore interface {
	Refusing() (reason string, refusing bool)
	Resume() error
}

// storeCheckEvery is how often the host asks the embedded server whether its store refuses
// writes, and, while it does, tries to put it back: the server's health check reads its
// directories and streams, a few milliseconds even with hundreds of functions.
const storeCheckEvery = 2 * time.Second

// storeState is what the host knows of whether JetStream takes its writes, from the embedded
// server's health or, on an external NATS, from its own writes (the heartbeat's).
type storeState struct {
	mu      sync.Mutex
	refusal *bus.StoreRefusal
	// fromWrite: the refusal was seen on one of the host's writes, so a write that succeeds
	// ends it; the embedded server's own word ends only with its health.
	fromWrite bool
}

// StoreRefusal says why JetStream's store refuses writes, or nil while it takes them.
func (h *Host) StoreRefusal() *bus.StoreRefusal {
	h.store.mu.Lock()
	defer h.store.mu.Unlock()
	if h.store.refusal == nil {
		return nil
	}
	r := *h.store.refusal
	return &r
}

func (h *Host) setRefusal(reason string, fromWrite bool) {
	h.store.mu.Lock()
	defer h.store.mu.Unlock()
	if h.store.refusal != nil {
		h.store.refusal.Reason = reason
		return
	}
	h.store.refusal, h.store.fromWrite = &bus.StoreRefusal{Reason: reason, Since: time.Now()}, fromWrite
	h.m.storeRefusing.Set(1)
	h.log.Error("JetStream's store refuses writes: triggers are refused (POST /run and /hooks answer 507), running jobs cannot commit and are handed back; "+bus.StoreRefusalAdvice,
		zap.String("reason", reason))
}

func (h *Host) clearRefusal(fromWrite bool, how string) {
	h.store.mu.Lock()
	defer h.store.mu.Unlock()
	r := h.store.refusal
	if r == nil || (fromWrite && !h.store.fromWrite) {
		return
	}
	h.store.refusal = nil
	h.m.storeRefusing.Set(0)
	h.log.Info("JetStream's store takes writes again", zap.String("how", how), zap.Duration("refused_for", time.Since(r.Since)), zap.String("was", r.Reason))
}

// noteWrite reads the outcome of one of the host's own writes (the heartbeat): a refusal by
// the store, or a timeout while connected, which is how a server with a full disk answers,
// marks the store refusing; a write that succeeds ends what a write had marked.
func (h *Host) noteWrite(err error) {
	switch reason, refused := bus.StoreRefused(err); {
	case err == nil:
		h.clearRefusal(true, "a write succeeded")
	case refused:
		h.setRefusal(reason, true)
	case errors.Is(err, context.DeadlineExceeded) && h.nc.IsConnected():
		// On one server that is a full disk; in a cluster it may as well be this host's node cut
		// off from the others, which the heartbeat's own log line says (see heartbeat).
		h.setRefusal("JetStream did not answer a write while connected: a NATS server whose disk is full stops answering writes, and so does a cluster node cut off from the others "+
			"(`nats server check jetstream` or the server's /healthz says which): "+err.Error(), true)
	}
}

// watchStore follows the embedded server's store until ctx ends: whether it refuses writes,
// and, while it does, starting JetStream again as soon as its directory has room. After a
// restart every waiting pull is sent again: the server forgot them with its consumers.
func (h *Host) watchStore(ctx context.Context, store EmbeddedStore) {
	t := time.NewTicker(storeCheckEvery)
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		reason, refusing := store.Refusing()
		if !refusing {
			h.clearRefusal(false, "the embedded server's health is ok")
			continue
		}
		h.setRefusal(reason, false)
		if err := store.Resume(); err != nil {
			if err.Error() != lastErr {
				h.log.Warn("the embedded JetStream store cannot be reopened yet; trying again", zap.Duration("every", storeCheckEvery), zap.Error(err))
				lastErr = err.Error()
			}
			continue
		}
		lastErr = ""
		h.m.storeResumes.Inc()
		h.pulls.renew()
		h.clearRefusal(false, "JetStream restarted on the embedded server once its disk had room")
	}
}
