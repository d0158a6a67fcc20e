package secrets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/audit"
	"github.com/agenthost/host/internal/bus"
)

// AdminRequest asks a host to set or remove a secret (or, with Hook, a webhook key) on
// bus.SecretsSetSubject or bus.SecretsRemoveSubject. The host seals the value with its own key,
// so whoever asks needs no key file, and a value can no longer be sealed with a key no host
// holds.
type AdminRequest struct {
	Name string `json:"name"`
	// Value is the JSON value to store (set only).
	Value json.RawMessage `json:"value,omitempty"`
	// Hook acts on the webhook keys rather than the function secrets.
	Hook bool `json:"hook,omitempty"`
	// Who says who asks, for the host's log: the dashboard's login, the CLI's user and NATS
	// connection. It is the asker's word; what authorizes the request is the NATS permission to
	// publish on the subject.
	Who string `json:"who"`
	// Face is where the asker was authenticated, for the audit entry: web, cli, nats; "" is
	// nats.
	Face string `json:"face,omitempty"`
}

// AdminReply is a host's answer. It never holds the value.
type AdminReply struct {
	// Replaced says a set overwrote a stored value (a rotation).
	Replaced bool   `json:"replaced,omitempty"`
	Host     string `json:"host,omitempty"`
	Error    string `json:"error,omitempty"`
}

// maxAdminTime bounds one request's store work, well within a requester's usual timeout.
const maxAdminTime = 10 * time.Second

// Admin answers the secret administration requests for a host that holds the key.
type Admin struct {
	Secrets  *Store
	HookKeys *HookKeys
	HostID   string
	Log      *zap.Logger
	// Audit records each request, done or refused (the AGENT_AUDIT stream); nil records none.
	Audit func(ctx context.Context, e audit.Entry) error
}

// Serve subscribes a to both subjects on nc, in the hosts' queue group; unsubscribe the
// returned subscriptions to stop.
func (a *Admin) Serve(nc *nats.Conn) ([]*nats.Subscription, error) {
	return bus.AdminSubscribe(nc, a.answer, bus.SecretsSetSubject, bus.SecretsRemoveSubject)
}

func (a *Admin) answer(m *nats.Msg) {
	reply := a.handle(m.Subject, m.Data)
	reply.Host = a.HostID
	b, _ := json.Marshal(reply)
	if err := m.Respond(b); err != nil && !errors.Is(err, nats.ErrMsgNoReply) {
		a.Log.Warn("secret administration: cannot answer", zap.String("subject", m.Subject), zap.Error(err))
	}
}

// handle answers one request and records it in the audit stream.
func (a *Admin) handle(subject string, data []byte) AdminReply {
	var req AdminRequest
	rep := a.act(subject, data, &req)
	if a.Audit == nil {
		return rep
	}
	e := audit.Entry{Who: req.Who, Face: req.Face, Act: "secret.set", Target: req.Name, Error: rep.Error, Host: a.HostID}
	if subject == bus.SecretsRemoveSubject {
		e.Act = "secret.rm"
	}
	if e.Who == "" {
		e.Who = "unnamed requester"
	}
	if e.Face == "" {
		e.Face = "nats"
	}
	if req.Hook {
		e.Detail = "webhook key"
	}
	if rep.Replaced {
		e.Detail = strings.TrimPrefix(e.Detail+"; replaced the stored value", "; ")
	}
	ctx, cancel := context.WithTimeout(context.Background(), maxAdminTime)
	defer cancel()
	if err := a.Audit(ctx, e); err != nil {
		a.Log.Warn("secret administration: the act happened, but its audit entry could not be written", zap.String("act", e.Act), zap.String("name", req.Name), zap.Error(err))
	}
	return rep
}

// act does what one request asks; req is what it read of it.
func (a *Admin) act(subject string, data []byte, req *AdminRequest) AdminReply {
	if err := json.Unmarshal(data, req); err != nil {
		// The body may hold a value: only its shape is reported.
		return AdminReply{Error: fmt.Sprintf("the request is not an AdminRequest JSON object (%d bytes)", len(data))}
	}
	st, what := a.Secrets, "secret"
	if req.Hook {
		st, what = a.HookKeys.s, "webhook key"
	}
	who := req.Who
	if who == "" {
		who = "unnamed requester"
	}
	ctx, cancel := context.WithTimeout(context.Background(), maxAdminTime)
	defer cancel()
	log := a.Log.With(zap.String("name", req.Name), zap.String("what", what), zap.String("by", who))
	switch subject {
	case bus.SecretsSetSubject:
		existed, err := st.has(ctx, req.Name)
		if err == nil {
			err = st.Set(ctx, req.Name, req.Value)
		}
		if err != nil {
			log.Warn("secret administration: set refused", zap.Error(err))
			return AdminReply{Error: err.Error()}
		}
		if existed {
			log.Info("secret administration: " + what + " rotated (a new value replaced the stored one)")
		} else {
			log.Info("secret administration: " + what + " set")
		}
		return AdminReply{Replaced: existed}
	case bus.SecretsRemoveSubject:
		if err := st.Delete(ctx, req.Name); err != nil {
			log.Warn("secret administration: remove refused", zap.Error(err))
			return AdminReply{Error: err.Error()}
		}
		log.Info("secret administration: " + what + " removed")
		return AdminReply{}
	}
	return AdminReply{Error: "unknown secret administration subject " + subject}
}

// has reports whether name is stored, without decrypting it.
func (s *Store) has(ctx context.Context, name string) (bool, error) {
	if err := ValidateName(name); err != nil {
		return false, err
	}
	if _, err := s.kv.Get(ctx, name); err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			return false, nil
		}
		return false, fmt.Errorf("look up %s %q in bucket %s: %w", s.ns.what, name, s.ns.bucket, err)
	}
	return true, nil
}
