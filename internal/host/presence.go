package host

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/presence"
)

// warnOtherVersions warns when another host serves different code under f's name: they share
// one consumer, so a message would run one version or the other depending on which host takes it.
func (h *Host) warnOtherVersions(ctx context.Context, f *functions.Function) {
	for _, other := range h.announced(ctx, f.Name) {
		if other.Version != f.Hash && other.Host != h.cfg.HostID {
			h.log.Warn("another host serves different code for this function; runs go to either version until both hosts serve the same files",
				zap.String("function", f.Name), zap.String("this_version", f.Hash), zap.String("this_host", h.cfg.HostID),
				zap.String("other_version", other.Version), zap.String("other_host", other.Host), zap.Time("other_since", other.Since))
		}
	}
}

// announce records which version of a function this host serves, under <function>.<host> in
// agent_functions (package presence). The entry is trusted while this host says it is alive
// (heartbeat); a host that dies leaves the listings within AnnounceTTL, one that stops at once
// (withdraw).
func (h *Host) announce(ctx context.Context, s *served) {
	if h.presence == nil {
		return
	}
	f := s.fn
	a := presence.Announcement{Version: f.Hash, Host: h.cfg.HostID, Since: s.since, Runtime: string(f.Runtime),
		Subjects: f.Subjects(), Concurrency: h.slots(f), Deployment: h.deployment(), Refused: h.refusalOf(f.Name),
		SwitchError: h.switchError()}
	if w, ok := h.runner.(Warmer); ok {
		n := w.WarmWanted(f)
		a.Warm = &n
	}
	s.annMu.Lock()
	defer s.annMu.Unlock()
	if s.retired {
		return
	}
	if err := h.presence.Announce(ctx, f.Name, a); err != nil {
		h.log.Debug("cannot announce the function's version", zap.String("function", f.Name), zap.Error(err))
	}
}

// retire ends a version's announcements; withdraw also deletes its entry, for a function this
// host no longer serves at all (a replaced version's entry is rewritten by its successor).
func (h *Host) retire(ctx context.Context, s *served, withdraw bool) {
	s.annMu.Lock()
	defer s.annMu.Unlock()
	s.retired = true
	if !withdraw || h.presence == nil {
		return
	}
	if err := h.presence.Withdraw(ctx, s.fn.Name, h.cfg.HostID); err != nil {
		h.log.Debug("cannot withdraw the function's version", zap.String("function", s.fn.Name), zap.Error(err))
	}
}

// heartbeat says this host is alive every AnnounceTTL/3 (or every third of the ack wait, if
// that is shorter and at least a second), and writes every served version's entry again every
// third of presence.FunctionsTTL, until ctx ends. A write that fails after one that did not is
// how the host notices it is cut off from JetStream, in time to say so before the messages it
// holds go to other hosts: a silent partition is seen by no NATS ping for minutes.
func (h *Host) heartbeat(ctx context.Context) {
	every := h.cfg.AnnounceTTL / 3
	if a := h.cfg.AckWait / 3; a >= time.Second && a < every {
		every = a
	}
	t := time.NewTicker(every)
	defer t.Stop()
	rewritten := time.Now()
	reached := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		actx, cancel := context.WithTimeout(ctx, every)
		err := h.presence.Alive(actx, h.cfg.HostID)
		h.noteWrite(err)
		switch {
		case err != nil && reached:
			h.log.Warn("cannot reach JetStream: this host can take no work until it does, and the jobs it holds go to other hosts after the ack wait",
				zap.String("nats", h.nc.ConnectedUrlRedacted()), zap.Duration("ack_wait", h.cfg.AckWait), zap.Error(err))
		case err != nil:
			h.log.Warn("cannot say this host is alive; other hosts and the CLI list its functions as unserved until it can", zap.Error(err))
		case !reached:
			h.log.Info("JetStream reached again: taking work", zap.String("nats", h.nc.ConnectedUrlRedacted()))
		}
		reached = err == nil
		cancel()
		if time.Since(rewritten) < presence.FunctionsTTL/3 {
			continue
		}
		rewritten = time.Now()
		for _, s := range h.servedSnapshot() {
			actx, cancel := context.WithTimeout(ctx, every)
			h.announce(actx, s)
			cancel()
		}
	}
}

// announced lists what the live hosts serving a function have announced.
func (h *Host) announced(ctx context.Context, function string) []presence.Announcement {
	if h.presence == nil {
		return nil
	}
	entries, err := h.presence.List(ctx, function)
	if err != nil {
		return nil
	}
	out := make([]presence.Announcement, 0, len(entries))
	for _, e := range entries {
		if e.Version == "" {
			continue // refused, served in no version (presenceRefusal)
		}
		out = append(out, e.Announcement)
	}
	return out
}

// presenceRefusal is the entry of a function this host refuses and serves in no version.
func presenceRefusal(host string, deployment int, r Refusal) presence.Announcement {
	return presence.Announcement{Host: host, Since: time.Now(), Deployment: deployment, Refused: r.Error}
}
