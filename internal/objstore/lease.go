package objstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/retry"
)

// leaseValue is what a lease entry holds. Nonce tells this acquisition apart from any other
// by the same holder, so "is it still ours" is a comparison of values, not of revisions that
// a concurrent renewal may be changing.
type leaseValue struct {
	Holder string `json:"holder"`
	Host   string `json:"host,omitempty"`
	Nonce  string `json:"nonce"`
}

// lease is one run's hold on one volume. The entry's age is measured by the NATS server from
// its last write (the bucket's TTL), so no two hosts' clocks are ever compared; locally only
// this host's monotonic clock is used, to give up on a lease it could not renew within a TTL.
type lease struct {
	v      *Volumes
	name   string
	key    string
	holder string
	value  []byte

	mu      sync.Mutex
	rev     uint64
	renewed time.Time // when the last successful write was sent
	lost    error

	cancel context.CancelFunc
	done   chan struct{}
}

// acquire takes the lease of a volume, waiting while another holder has it.
func (v *Volumes) acquire(ctx context.Context, name, holder string) (*lease, error) {
	nonce := make([]byte, 8)
	rand.Read(nonce)
	value, _ := json.Marshal(leaseValue{Holder: holder, Host: v.host, Nonce: hex.EncodeToString(nonce)})
	l := &lease{v: v, name: name, key: kvKey(name), holder: holder, value: value}
	start := time.Now()
	ok, err := l.tryCreate(ctx)
	if err == nil && !ok {
		err = l.wait(ctx)
	}
	if err != nil {
		return nil, err
	}
	v.m.leaseWait.Observe(time.Since(start).Seconds())
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l.cancel, l.done = cancel, make(chan struct{})
	go l.renewLoop(rctx)
	return l, nil
}

// tryCreate takes the lease if nobody holds it, and reports whether it did.
func (l *lease) tryCreate(ctx context.Context) (bool, error) {
	sent := time.Now()
	attempts := 0
	var rev uint64
	err := l.v.kvCall(ctx, "take lease of volume", LeasesBucket, l.name, func() error {
		attempts++
		var err error
		rev, err = l.v.leases.Create(ctx, l.key, l.value)
		return err
	})
	if errors.Is(err, jetstream.ErrKeyExists) {
		if attempts == 1 {
			return false, nil
		}
		// An earlier attempt that timed out may have landed.
		e, gerr := l.v.leases.Get(ctx, l.key)
		if gerr != nil || !bytes.Equal(e.Value(), l.value) {
			return false, nil
		}
		rev, err = e.Revision(), nil
	}
	if err != nil {
		return false, fmt.Errorf("take the lease of volume %s: %w", l.name, err)
	}
	l.mu.Lock()
	l.rev, l.renewed = rev, sent
	l.mu.Unlock()
	return true, nil
}

// wait retries tryCreate whenever the entry is deleted or purged, and also on a timer: an
// entry that expires by age produces no watch event.
func (l *lease) wait(ctx context.Context) error {
	var updates <-chan jetstream.KeyValueEntry
	if w, err := l.v.leases.Watch(ctx, l.key, jetstream.UpdatesOnly()); err == nil {
		defer w.Stop()
		updates = w.Updates()
	} else {
		l.v.log.Warn("cannot watch a volume lease; polling instead", zap.String("volume", l.name), zap.Error(err))
	}
	start := time.Now()
	logged := false
	for attempt := 1; ; attempt++ {
		// Create again now that the watch is in place: the holder may have left between the
		// first attempt and the watch, and that event would not be replayed.
		ok, err := l.tryCreate(ctx)
		if err != nil {
			return err
		}
		if ok {
			if logged {
				l.v.log.Info("took volume lease after waiting", zap.String("volume", l.name),
					zap.String("holder", l.holder), zap.Duration("waited", time.Since(start)))
			}
			return nil
		}
		if !logged {
			logged = true
			by := l.heldBy(ctx)
			l.v.log.Info("waiting for volume lease", zap.String("volume", l.name), zap.String("holder", l.holder),
				zap.String("held_by", by.Holder), zap.String("held_by_host", by.Host))
		}
		t := time.NewTimer(retry.Lease.Wait(attempt))
	waiting:
		for {
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("wait for the lease of volume %s, held by %s: %w", l.name, l.heldBy(context.WithoutCancel(ctx)).Holder, ctx.Err())
			case e, ok := <-updates:
				if !ok {
					updates = nil // watcher gone; the timer still polls
					continue
				}
				if e == nil || e.Operation() == jetstream.KeyValuePut {
					continue // a renewal: still held
				}
				break waiting
			case <-t.C:
				break waiting
			}
		}
		t.Stop()
	}
}

// heldBy says who holds the lease now, for logs; empty if unknown.
func (l *lease) heldBy(ctx context.Context) leaseValue {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var lv leaseValue
	if e, err := l.v.leases.Get(ctx, l.key); err == nil {
		if json.Unmarshal(e.Value(), &lv) != nil {
			lv.Holder = string(e.Value())
		}
	}
	return lv
}

func (l *lease) renewLoop(ctx context.Context) {
	defer close(l.done)
	t := time.NewTicker(l.v.opts.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := l.renew(ctx); err != nil {
			l.mu.Lock()
			l.lost = err
			l.mu.Unlock()
			l.v.log.Error("lost volume lease; this run's changes to the volume will not be committed",
				zap.String("volume", l.name), zap.String("holder", l.holder), zap.Error(err))
			return
		}
	}
}

// renew rewrites the entry, which restarts its server-side age. It returns an error only
// when the lease is lost for good; a failed write is retried on the next tick while the lease
// may still be valid.
func (l *lease) renew(ctx context.Context) error {
	ttl := l.v.opts.LeaseTTL
	l.mu.Lock()
	rev := l.rev
	l.mu.Unlock()
	sent := time.Now()
	cctx, cancel := context.WithTimeout(ctx, ttl/3)
	newRev, err := l.v.leases.Update(cctx, l.key, l.value, rev)
	cancel()
	if err == nil {
		l.mu.Lock()
		l.rev, l.renewed = newRev, sent
		l.mu.Unlock()
		return nil
	}
	if ctx.Err() != nil {
		return nil // released meanwhile
	}
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound) {
		e, gerr := l.v.leases.Get(ctx, l.key)
		switch {
		case gerr == nil && bytes.Equal(e.Value(), l.value):
			// A renewal that timed out landed after all; adopt its revision. When it was
			// written is unknown, so the renewal time stays that of the last known write.
			l.mu.Lock()
			l.rev = e.Revision()
			l.mu.Unlock()
			return nil
		case gerr == nil:
			var lv leaseValue
			json.Unmarshal(e.Value(), &lv)
			return fmt.Errorf("%w: the lease of volume %s expired and was taken by %s", ErrLeaseLost, l.name, lv.Holder)
		case errors.Is(gerr, jetstream.ErrKeyNotFound) || errors.Is(gerr, jetstream.ErrKeyDeleted):
			return fmt.Errorf("%w: the lease of volume %s expired or was deleted", ErrLeaseLost, l.name)
		}
	}
	l.mu.Lock()
	since := time.Since(l.renewed)
	l.mu.Unlock()
	if since >= ttl {
		return fmt.Errorf("%w: could not renew the lease of volume %s for %s, its TTL: %w", ErrLeaseLost, l.name, since.Round(time.Millisecond), err)
	}
	l.v.log.Warn("cannot renew volume lease; retrying", zap.String("volume", l.name), zap.Error(err))
	return nil
}

// check fails if the lease is known to be lost, or may have expired unrenewed.
func (l *lease) check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost != nil {
		return l.lost
	}
	if since := time.Since(l.renewed); since >= l.v.opts.LeaseTTL {
		return fmt.Errorf("%w: the lease of volume %s was last renewed %s ago, beyond its TTL of %s", ErrLeaseLost, l.name, since.Round(time.Millisecond), l.v.opts.LeaseTTL)
	}
	return nil
}

// verify asks the server whether the lease is still this run's, right before a commit.
func (l *lease) verify(ctx context.Context) error {
	if err := l.check(); err != nil {
		return err
	}
	var e jetstream.KeyValueEntry
	err := l.v.kvCall(ctx, "check lease of volume", LeasesBucket, l.name, func() error {
		var err error
		e, err = l.v.leases.Get(ctx, l.key)
		return err
	})
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return fmt.Errorf("%w: the lease of volume %s expired", ErrLeaseLost, l.name)
	}
	if err != nil {
		return fmt.Errorf("check the lease of volume %s: %w", l.name, err)
	}
	if !bytes.Equal(e.Value(), l.value) {
		var lv leaseValue
		json.Unmarshal(e.Value(), &lv)
		return fmt.Errorf("%w: the lease of volume %s is now held by %s", ErrLeaseLost, l.name, lv.Holder)
	}
	return l.check()
}

// release stops renewing and deletes the entry if it is still this run's. It runs even when
// ctx is cancelled (a cancelled job must still free its volume), bounded by RetryFor.
func (l *lease) release(ctx context.Context) error {
	l.cancel()
	<-l.done
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.v.opts.RetryFor)
	defer cancel()
	l.mu.Lock()
	rev, lost := l.rev, l.lost
	l.mu.Unlock()
	if lost != nil {
		return nil // not ours any more: nothing to free
	}
	del := func(rev uint64) error {
		return l.v.kvCall(ctx, "release lease of volume", LeasesBucket, l.name, func() error {
			return l.v.leases.Delete(ctx, l.key, jetstream.LastRevision(rev))
		})
	}
	err := del(rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		e, gerr := l.v.leases.Get(ctx, l.key)
		if gerr != nil || !bytes.Equal(e.Value(), l.value) {
			return nil // expired or taken meanwhile
		}
		err = del(e.Revision())
	}
	if err != nil {
		return fmt.Errorf("release the lease of volume %s: %w (it expires by itself after %s)", l.name, err, l.v.opts.LeaseTTL)
	}
	return nil
}
