// Package hooks turns HTTP deliveries into durable NATS messages: POST /hooks/<source> is
// checked against the source's declared credential and published to webhook.<source>.
package hooks

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/secrets"
	"github.com/agenthost/host/internal/trace"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/ids"
)

// SubjectPrefix is where deliveries are published: webhook.<source>.
const SubjectPrefix = "webhook."

// Auth is how a source proves a delivery is genuine.
type Auth string

const (
	// HMAC: GitHub-style X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>.
	HMAC Auth = "hmac"
	// Bearer: Authorization: Bearer <token>.
	Bearer Auth = "bearer"
	// Open: no credential.
	Open Auth = "open"
)

// Source is one declared webhook source.
type Source struct {
	Name string
	Auth Auth
	// Secret names the webhook key (in the hook-key store, not among the function secrets)
	// holding the HMAC key or bearer token; it is read per request, so rotating it needs no
	// restart.
	Secret string
}

var sourceName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ParseSource reads a --hook flag value: <source>=hmac:<key>, <source>=bearer:<key> or
// <source>=open, where <key> names a webhook key.
func ParseSource(s string) (Source, error) {
	name, spec, ok := strings.Cut(s, "=")
	if !ok || !sourceName.MatchString(name) {
		return Source{}, fmt.Errorf("--hook %q: want <source>=hmac:<key>, <source>=bearer:<key> or <source>=open, with <source> made of letters, digits, - and _", s)
	}
	kind, secret, _ := strings.Cut(spec, ":")
	src := Source{Name: name, Auth: Auth(kind), Secret: secret}
	switch src.Auth {
	case HMAC, Bearer:
		if secret == "" {
			return Source{}, fmt.Errorf("--hook %q: %s needs the name of a webhook key (set with host secrets set --hook <key> '\"<value>\"'), e.g. %s=%s:%s-key", s, kind, name, kind, name)
		}
	case Open:
		if secret != "" {
			return Source{}, fmt.Errorf("--hook %q: open takes no key", s)
		}
	default:
		return Source{}, fmt.Errorf("--hook %q: unknown authentication %q (use hmac, bearer or open)", s, kind)
	}
	return src, nil
}

// Keys holds the webhook keys, apart from the function secrets so that no `$secret:` reaches
// them; *secrets.HookKeys is one.
type Keys interface {
	Get(ctx context.Context, name string) (json.RawMessage, error)
	Set(ctx context.Context, name string, value json.RawMessage) error
}

// FunctionSecrets is the function secret store, where the contract's `host secrets set <key>`
// puts a webhook key; *secrets.Store is one. A key found there is moved into Keys.
type FunctionSecrets interface {
	Get(ctx context.Context, name string) (json.RawMessage, error)
	Delete(ctx context.Context, name string) error
}

// Handler serves POST /hooks/{source}.
type Handler struct {
	js jetstream.JetStream
	// storeRefusal: Config.StoreRefusal.
	storeRefusal func() *bus.StoreRefusal
	keys         Keys
	fsecrets     FunctionSecrets // nil: keys are only read from keys
	reg          *Registry       // nil: no bucket sources, no delivery records
	hostID       string

	mu sync.RWMutex
	// flags are the sources of serve --hook; added those of the sources bucket. A name in both
	// is the flag's: the operator of this host said so on its command line.
	flags, added map[string]Source
	maxBytes     int64
	log          *zap.Logger
	msgID        func(source, delivery string) string
	sign         func(parts ...string) string
	// bodyTimeout bounds reading a delivery's body; slots bounds deliveries in progress, so
	// senders that stall cannot hold connections without end or in any number.
	bodyTimeout time.Duration
	slots       chan struct{}
}

// Defaults of a Handler, exported for the flags that set them.
const (
	// DefaultMaxBytes bounds a delivery's body (Config.MaxBytes).
	DefaultMaxBytes = 1 << 20
	// DefaultBodyTimeout bounds the time a body may take to arrive (Config.BodyTimeout).
	DefaultBodyTimeout = 30 * time.Second
	// DefaultMaxConcurrent bounds the deliveries read at once (Config.MaxConcurrent).
	DefaultMaxConcurrent = 64
)

// Config configures a Handler. The zero value declares no source, so every delivery gets 404.
type Config struct {
	// Sources are the declared webhook sources; none when empty.
	Sources []Source

	// MaxBytes bounds a delivery's body; a larger one gets 413. Zero (or negative) is
	// DefaultMaxBytes.
	MaxBytes int64

	// MsgIDs makes a delivery's message id from its source and the sender's delivery id (""
	// when it sent none). The host derives them with a key of its own, so that no other
	// publisher can send a message under a delivery's id first and have the real one dropped
	// as its duplicate. Nil is a key of this handler's own, which no other host shares.
	MsgIDs func(source, delivery string) string

	// Sign signs with the hosts' key (ids.Key.Derive), so that the jobs a delivery starts say
	// "webhook <source>" as a host vouches for it (ids.Vouch); nil: they say it as a claim.
	Sign func(parts ...string) string

	// BodyTimeout bounds the time a delivery's body may take to arrive; a sender that stalls
	// gets 408 and its connection is closed. Zero (or negative) is DefaultBodyTimeout.
	BodyTimeout time.Duration

	// MaxConcurrent bounds the deliveries read at once; past it a delivery gets 503 with
	// Retry-After, which webhook senders retry. Zero (or negative) is DefaultMaxConcurrent.
	MaxConcurrent int

	// Registry holds the sources added with `host hooks add` (see Watch) and keeps each
	// source's last deliveries; nil: flag sources only, and no delivery history.
	Registry *Registry
	// HostID names this host in the delivery history.
	HostID string

	// FunctionSecrets lets the handler find a key that was set the contract's way, `host
	// secrets set <key>`, in the function secret store: before each use it moves the key from
	// there into the hook-key store (see MoveKey), so it does not stay where a function could
	// be given it, and a later `host secrets set <key>` still rotates it. Nil: keys are only
	// read from the hook-key store.
	FunctionSecrets FunctionSecrets

	// StoreRefusal says why JetStream's store refuses writes (nil: it takes them); a delivery
	// is then refused with 507 before it is published, rather than left to time out. Nil:
	// only the publish's own answer is read.
	StoreRefusal func() *bus.StoreRefusal
}

// New builds the handler for cfg; keys may be nil (a host without a secrets key), and then
// every authenticated source answers 503.
func New(js jetstream.JetStream, keys Keys, log *zap.Logger, cfg Config) *Handler {
	h := &Handler{js: js, keys: keys, fsecrets: cfg.FunctionSecrets, flags: map[string]Source{}, added: map[string]Source{},
		maxBytes: cfg.MaxBytes, log: log, msgID: cfg.MsgIDs, sign: cfg.Sign, storeRefusal: cfg.StoreRefusal, bodyTimeout: cfg.BodyTimeout, reg: cfg.Registry, hostID: cfg.HostID}
	for _, s := range cfg.Sources {
		h.flags[s.Name] = s
	}
	if h.maxBytes <= 0 {
		h.maxBytes = DefaultMaxBytes
	}
	if h.msgID == nil {
		// A host passes its cluster-wide key, so that every host names a redelivered
		// delivery alike; alone, a handler still needs ids that no publisher can guess.
		h.msgID = ids.NewKey(nil).Hook
	}
	if h.bodyTimeout <= 0 {
		h.bodyTimeout = DefaultBodyTimeout
	}
	n := cfg.MaxConcurrent
	if n <= 0 {
		n = DefaultMaxConcurrent
	}
	h.slots = make(chan struct{}, n)
	return h
}

// headers carried from the request onto the message: what a consumer needs to interpret the body.
var carried = []string{"Content-Type", "User-Agent", "X-GitHub-Event", "X-GitHub-Delivery", "X-GitHub-Hook-ID", "X-Gitlab-Event", "Idempotency-Key"}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("source")
	src, ok := h.source(name)
	if !ok {
		h.refuse(w, http.StatusNotFound, name, "no webhook source %q is declared; add it with host hooks add %s hmac|bearer|open [--key <key>] (or serve --hook)", name, name)
		return
	}
	select {
	case h.slots <- struct{}{}:
		defer func() { <-h.slots }()
	default:
		w.Header().Set("Retry-After", "1")
		h.refuse(w, http.StatusServiceUnavailable, name, "%d deliveries are being read already (--hook-max-concurrent); retry shortly", cap(h.slots))
		return
	}
	if err := http.NewResponseController(w).SetReadDeadline(time.Now().Add(h.bodyTimeout)); err != nil {
		h.log.Debug("cannot bound the body's read time", zap.Error(err)) // not a net.Conn (tests)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.maxBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		var netErr net.Error
		switch {
		case errors.As(err, &tooBig):
			h.refuse(w, http.StatusRequestEntityTooLarge, name, "body over the %d-byte limit (--hook-max-bytes)", h.maxBytes)
			return
		case errors.As(err, &netErr) && netErr.Timeout():
			w.Header().Set("Connection", "close")
			h.refuse(w, http.StatusRequestTimeout, name, "the body did not arrive within %s (--hook-body-timeout); send it at once", h.bodyTimeout)
			return
		}
		h.refuse(w, http.StatusBadRequest, name, "reading the body: %v", err)
		return
	}
	if status, err := h.authenticate(r.Context(), src, r, body); err != nil {
		h.refuse(w, status, name, "%v", err)
		h.record(name, Delivery{Status: status, Error: err.Error()})
		return
	}

	delivery := r.Header.Get("X-GitHub-Delivery")
	if delivery == "" {
		delivery = r.Header.Get("Idempotency-Key")
	}
	id := h.msgID(name, delivery)
	m := nats.NewMsg(SubjectPrefix + name)
	m.Data = body
	for _, k := range carried {
		if v := r.Header.Get(k); v != "" {
			m.Header.Set(k, v)
		}
	}
	m.Header.Set(jetstream.MsgIDHeader, id)
	trace.Carry(m.Header, r.Header) // a sender's traceparent: the flow continues its trace
	// The delivery id is the flow id of what it starts: every job of every function on
	// webhook.<source>, and their next steps, so that `host jobs --delivery <id>` and the
	// dashboard's flow page find them.
	m.Header.Set(bus.HeaderFlowID, id)
	if !ids.Vouch(m, h.sign, "webhook "+name, "") {
		m.Header.Set(bus.HeaderStartedBy, "webhook "+name)
	}
	if h.storeRefusal != nil {
		if ref := h.storeRefusal(); ref != nil {
			h.storeRefused(w, name, ref.Reason)
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	ack, err := h.js.PublishMsg(ctx, m)
	if reason, refused := bus.StoreRefused(err); refused {
		h.storeRefused(w, name, reason)
		return
	}
	if err != nil {
		h.log.Error("webhook not stored; the sender should retry", zap.String("source", name), zap.Error(err))
		h.record(name, Delivery{Status: http.StatusServiceUnavailable, Error: "the delivery could not be stored"})
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "the delivery could not be stored; retry later"})
		return
	}
	h.log.Info("webhook accepted", zap.String("source", name), zap.String("id", id), zap.Bool("duplicate", ack.Duplicate), zap.Int("bytes", len(body)))
	h.record(name, Delivery{ID: id, Status: http.StatusAccepted, Duplicate: ack.Duplicate})
	writeJSON(w, http.StatusAccepted, map[string]any{"id": id, "flow": id})
}

// storeRefused answers 507 Insufficient Storage with the store's reason: the delivery is not
// stored, and a sender's retry later (webhook senders retry a 5xx) is taken once there is room.
func (h *Handler) storeRefused(w http.ResponseWriter, name, reason string) {
	msg := "the delivery was not stored: JetStream's store refuses writes (" + reason + "); " + bus.StoreRefusalAdvice + "; send it again then"
	h.log.Error("webhook refused: JetStream's store refuses writes", zap.String("source", name), zap.String("reason", reason))
	// Not kept in the source's history: that is a write to the same store, which would wait
	// for its timeout.
	w.Header().Set("Retry-After", "30")
	writeJSON(w, http.StatusInsufficientStorage, map[string]string{"error": msg})
}

// source is the declared source name: the flag's, else the bucket's.
func (h *Handler) source(name string) (Source, bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if s, ok := h.flags[name]; ok {
		return s, true
	}
	s, ok := h.added[name]
	return s, ok
}

// record keeps a delivery in its source's history; a failure to is logged, never the sender's
// problem.
func (h *Handler) record(source string, d Delivery) {
	if h.reg == nil {
		return
	}
	d.At, d.Host = time.Now().UTC(), h.hostID
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.reg.record(ctx, source, d); err != nil {
		h.log.Warn("webhook delivery not kept in its source's history", zap.String("source", source), zap.String("id", d.ID), zap.Error(err))
	}
	// The source may have been removed while this delivery was taken: its history goes with it
	// (Watch purges it too once it has stopped serving it; whichever comes last wins).
	if !h.serves(source) {
		h.forget(ctx, source)
	}
}

// serves reports whether the handler still serves source, from a flag or the bucket.
func (h *Handler) serves(source string) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	_, flagged := h.flags[source]
	_, added := h.added[source]
	return flagged || added
}

// forget drops a removed source's delivery history.
func (h *Handler) forget(ctx context.Context, source string) {
	if err := h.reg.purgeDeliveries(ctx, source); err != nil {
		h.log.Warn("the removed webhook source's delivery history stays", zap.String("source", source), zap.Error(err))
	}
}

// Watch loads the sources of the registry and follows it until ctx ends: a source added there
// is served at once, one removed answers 404 at once. It returns once the current sources are
// loaded. A source whose key is missing is served (deliveries get 503 until the key is set) and
// warned about now, not at its first delivery.
func (h *Handler) Watch(ctx context.Context) error {
	if h.reg == nil {
		return nil
	}
	return h.reg.watch(ctx, func(name string, e *Entry, err error) {
		if err != nil {
			h.log.Error("webhook source in the bucket is unreadable; not served", zap.String("source", name), zap.Error(err))
			e = nil
		}
		if e == nil {
			h.mu.Lock()
			_, had := h.added[name]
			delete(h.added, name)
			h.mu.Unlock()
			if had {
				h.log.Info("webhook source removed", zap.String("source", name), zap.String("bucket", SourcesBucket))
				if !h.serves(name) {
					fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					h.forget(fctx, name)
					cancel()
				}
			}
			return
		}
		src, err := NewSource(e.Name, e.Auth, e.Key)
		if err == nil && src.Name != name {
			err = fmt.Errorf("the entry names source %q", src.Name)
		}
		if err != nil {
			h.log.Error("webhook source in the bucket is invalid; not served", zap.String("source", name), zap.Error(err))
			return
		}
		h.mu.Lock()
		_, flagged := h.flags[name]
		h.added[name] = src
		h.mu.Unlock()
		if flagged {
			h.log.Warn("webhook source is declared by serve --hook on this host and in the bucket: the flag's declaration wins here",
				zap.String("source", name), zap.String("bucket", SourcesBucket))
			return
		}
		h.log.Info("webhook source loaded", zap.String("source", name), zap.String("auth", string(src.Auth)), zap.String("key", src.Secret), zap.String("added_by", e.AddedBy))
		h.warnKey(ctx, src)
	})
}

// warnKey says at once that a source cannot authenticate deliveries, rather than at the first
// 503.
func (h *Handler) warnKey(ctx context.Context, src Source) {
	if err := h.keyMissing(ctx, src); err != nil {
		h.log.Warn("webhook source's key is missing: its deliveries get 503 until it is set",
			zap.String("source", src.Name), zap.String("key", src.Secret), zap.String("set_with", "host secrets set --hook "+src.Secret+" '\"<value>\"'"), zap.Error(err))
	}
}

// WarnMissingKeys warns of each flag source whose key is missing, for a host at start.
func (h *Handler) WarnMissingKeys(ctx context.Context) {
	h.mu.RLock()
	flags := make([]Source, 0, len(h.flags))
	for _, s := range h.flags {
		flags = append(flags, s)
	}
	h.mu.RUnlock()
	for _, s := range flags {
		h.warnKey(ctx, s)
	}
}

// keyMissing says why src cannot authenticate a delivery; nil when it can (or is open).
func (h *Handler) keyMissing(ctx context.Context, src Source) error {
	if src.Auth == Open {
		return nil
	}
	_, err := h.keyValue(ctx, src.Secret)
	return err
}

// KeyUser names the source whose key name is, if one is: such a name is never handed to a
// function as a secret, whether the source comes from a flag or from the bucket.
func (h *Handler) KeyUser(name string) (source string, ok bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, m := range []map[string]Source{h.flags, h.added} {
		for _, s := range m {
			if s.Secret != "" && s.Secret == name {
				return s.Name, true
			}
		}
	}
	return "", false
}

// SourceStatus is a source as the dashboard lists it.
type SourceStatus struct {
	Source
	// Origin is "flag" (serve --hook on this host) or "bucket" (host hooks add).
	Origin  string
	AddedBy string
	// KeyError says why the source's key cannot be used; "" when it can.
	KeyError   string
	Deliveries []Delivery
}

// Status lists every source this host serves, sorted by name, with its key's state and its
// last deliveries.
func (h *Handler) Status(ctx context.Context) ([]SourceStatus, error) {
	h.mu.RLock()
	var out []SourceStatus
	for _, s := range h.flags {
		out = append(out, SourceStatus{Source: s, Origin: "flag"})
	}
	for name, s := range h.added {
		if _, ok := h.flags[name]; !ok {
			out = append(out, SourceStatus{Source: s, Origin: "bucket"})
		}
	}
	h.mu.RUnlock()
	slices.SortFunc(out, func(a, b SourceStatus) int { return strings.Compare(a.Name, b.Name) })
	var added map[string]Entry
	if h.reg != nil {
		entries, err := h.reg.List(ctx)
		if err != nil {
			return nil, err
		}
		added = map[string]Entry{}
		for _, e := range entries {
			added[e.Name] = e
		}
	}
	for i := range out {
		s := &out[i]
		if s.Origin == "bucket" {
			s.AddedBy = added[s.Name].AddedBy
		}
		if err := h.keyMissing(ctx, s.Source); err != nil {
			s.KeyError = err.Error()
		}
		if h.reg != nil {
			ds, err := h.reg.Deliveries(ctx, s.Name)
			if err != nil {
				return nil, err
			}
			s.Deliveries = ds
		}
	}
	return out, nil
}

// authenticate checks the delivery against its source's credential.
func (h *Handler) authenticate(ctx context.Context, src Source, r *http.Request, body []byte) (int, error) {
	if src.Auth == Open {
		return 0, nil
	}
	key, err := h.keyValue(ctx, src.Secret)
	if err != nil {
		h.log.Error("webhook key unavailable", zap.String("source", src.Name), zap.String("key", src.Secret), zap.Error(err))
		return http.StatusServiceUnavailable, errors.New("the source's key is not available; the operator must set it")
	}
	switch src.Auth {
	case HMAC:
		sig, ok := strings.CutPrefix(r.Header.Get("X-Hub-Signature-256"), "sha256=")
		given, err := hex.DecodeString(sig)
		if !ok || err != nil {
			return http.StatusUnauthorized, errors.New("missing or malformed X-Hub-Signature-256")
		}
		mac := hmac.New(sha256.New, []byte(key))
		mac.Write(body)
		if !hmac.Equal(given, mac.Sum(nil)) {
			return http.StatusUnauthorized, errors.New("signature does not match the body")
		}
	case Bearer:
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(token), []byte(key)) != 1 {
			return http.StatusUnauthorized, errors.New("missing or wrong bearer token")
		}
	}
	return 0, nil
}

// keyValue reads a webhook key: a JSON string is used as its text.
func (h *Handler) keyValue(ctx context.Context, name string) (string, error) {
	if h.keys == nil {
		return "", errors.New("no webhook key store: the host runs without a secrets key (--secrets-key-file)")
	}
	if h.fsecrets != nil {
		if err := MoveKey(ctx, h.keys, h.fsecrets, name, h.log); err != nil {
			return "", err
		}
	}
	raw, err := h.keys.Get(ctx, name)
	if err != nil {
		return "", err
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	return string(raw), nil
}

// MoveKey moves webhook key name, if the function secret store holds it, into the hook-key
// store, and removes it from the function store: a key that signs deliveries must not sit
// where a function declaring it could be handed it. A key already in keys is overwritten, so
// that `host secrets set <key>` rotates it as the contract says. It is a no-op when the
// function store does not hold name.
func MoveKey(ctx context.Context, keys Keys, fs FunctionSecrets, name string, log *zap.Logger) error {
	raw, err := fs.Get(ctx, name)
	if errors.Is(err, secrets.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look for webhook key %q among the function secrets: %w", name, err)
	}
	if err := keys.Set(ctx, name, raw); err != nil {
		return fmt.Errorf("move webhook key %q out of the function secrets (it stays unused there until this works; "+
			"set it with host secrets set --hook %s): %w", name, name, err)
	}
	if err := fs.Delete(ctx, name); err != nil && !errors.Is(err, secrets.ErrNotFound) {
		return fmt.Errorf("remove webhook key %q from the function secrets after moving it (remove it with host secrets rm %s): %w", name, name, err)
	}
	log.Warn("webhook key moved out of the function secrets, where a function declaring it could have read it, "+
		"into the webhook key store; set it with `host secrets set --hook` from now on",
		zap.String("key", name), zap.String("bucket", secrets.HookKeysBucket))
	return nil
}

func (h *Handler) refuse(w http.ResponseWriter, status int, source, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	h.log.Warn("webhook refused", zap.String("source", source), zap.Int("status", status), zap.String("reason", msg))
	writeJSON(w, status, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
