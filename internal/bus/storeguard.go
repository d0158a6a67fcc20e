package bus

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// StoreRefusal says why JetStream's store refuses writes, and since when.
type StoreRefusal struct {
	Reason string
	Since  time.Time
}

// What an operator does about a store that refuses writes, said wherever the refusal is.
const StoreRefusalAdvice = "free space on the NATS data disk (or raise max_file_store / --store-limit); the host takes writes again by itself once there is room"

// Error codes of the JetStream API that mean the store refused to keep a message: the
// server's or the account's storage is used up, a stream's limit is reached (its DiscardNew
// answer comes as "store failed"), or JetStream is off.
var storeRefusalCodes = map[jetstream.ErrorCode]bool{
	10002: true, // JSAccountResourcesExceededErr
	10023: true, // JSInsufficientResourcesErr: the server's max_file_store is used up
	10047: true, // JSStorageResourcesExceededErr
	10077: true, // JSStreamStoreFailedErr: "maximum bytes exceeded", "maximum messages per subject exceeded", a write error
	10076: true, // JSNotEnabledErr
	10039: true, // JSNotEnabledForAccountErr
}

// StoreRefused reports whether err is JetStream refusing to store a message, and the server's
// reason.
func StoreRefused(err error) (string, bool) {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && storeRefusalCodes[apiErr.ErrorCode] {
		return apiErr.Description, true
	}
	return "", false
}

// QueueFull reports whether err is a call refused because its function's queue is full: its
// queue: limit (ErrQueueFull), or its subject holding the trigger stream's most
// (MaxMsgsPerSubject with DiscardNewPerSubject), as opposed to the whole store being full.
func QueueFull(err error) bool {
	if errors.Is(err, ErrQueueFull) {
		return true
	}
	reason, ok := StoreRefused(err)
	return ok && strings.Contains(reason, "per subject")
}

// EmbeddedStore watches the JetStream store of the embedded server and starts JetStream again
// once it can write.
//
// Why: a standalone nats-server that meets "no space left on device" keeps the error on the
// stream (and the stream's file store) for good: every later write to that stream fails, and
// the server does not answer its publisher (a publish, a KV update, ends in a timeout). Freeing
// space does not clear it; only a restart of JetStream, which reopens every stream from its
// files, does. A clustered server turns JetStream off instead (handleOutOfSpace) and never on
// again. Both cases are seen through the server's own health check.
type EmbeddedStore struct {
	srv *server.Server
	// cfg is JetStream's configuration as the server started with it: a restart must not size
	// the store anew from a disk that is nearly full (the server's default takes 75% of the
	// free space when no max_file_store is set).
	cfg server.JetStreamConfig
	// probe is how much the store directory must take, written and synced, before JetStream is
	// started again: a restart on a disk that is still full would only fail again.
	probe int64

	mu sync.Mutex
}

// DefaultRoomProbe is what EmbeddedStore writes to see that the disk has room again: more
// than a message block's first write, so that a restart is not followed at once by the same
// refusal.
const DefaultRoomProbe = 4 << 20

// NewEmbeddedStore watches srv's JetStream, which must be enabled.
func NewEmbeddedStore(srv *server.Server) (*EmbeddedStore, error) {
	cfg := srv.JetStreamConfig()
	if cfg == nil {
		return nil, errors.New("watch the embedded JetStream store: JetStream is not enabled on the embedded server")
	}
	c := *cfg
	// The server keeps its files under <store_dir>/jetstream and adds that part itself.
	c.StoreDir = filepath.Dir(c.StoreDir)
	return &EmbeddedStore{srv: srv, cfg: c, probe: DefaultRoomProbe}, nil
}

// Room is the store's size (max_file_store, as the server started with it) and how much of it
// the max bytes of its file streams reserve: the server refuses a stream whose max bytes do not
// fit what is left ("insufficient storage resources").
func (e *EmbeddedStore) Room() (maxStore, reserved int64, err error) {
	_, reserved, err = e.srv.JetStreamReservedResources()
	if err != nil {
		return 0, 0, fmt.Errorf("read what the embedded JetStream store reserves: %w", err)
	}
	return e.cfg.MaxStore, reserved, nil
}

// Refusing reports whether the store refuses writes, and the server's reason.
func (e *EmbeddedStore) Refusing() (string, bool) {
	if !e.srv.JetStreamEnabled() {
		return "JetStream is off on the embedded NATS server (it turns it off when its store runs out of space)", true
	}
	h := e.srv.Healthz(&server.HealthzOptions{})
	if strings.Contains(h.Error, "write error") {
		return h.Error, true
	}
	return "", false
}

// Resume starts JetStream again if the store refuses writes and its directory has room now.
// It returns nil when the store takes writes afterwards (or did already), and an error saying
// what still stands in the way otherwise. Clients keep their connections; their waiting pulls
// and subscriptions to streams end with the restart and must be sent again.
func (e *EmbeddedStore) Resume() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, refusing := e.Refusing(); !refusing {
		return nil
	}
	if err := e.room(); err != nil {
		return err
	}
	if e.srv.JetStreamEnabled() {
		if err := e.srv.ShutdownJetStream(); err != nil {
			return fmt.Errorf("stop JetStream to reopen its store %s: %w", e.cfg.StoreDir, err)
		}
	}
	cfg := e.cfg
	if err := e.srv.EnableJetStream(&cfg); err != nil {
		return fmt.Errorf("start JetStream again on %s: %w", e.cfg.StoreDir, err)
	}
	if reason, refusing := e.Refusing(); refusing {
		return fmt.Errorf("JetStream started again on %s but still refuses writes: %s", e.cfg.StoreDir, reason)
	}
	return nil
}

// room writes and syncs e.probe bytes in the store directory, and removes them.
func (e *EmbeddedStore) room() error {
	path := filepath.Join(e.cfg.StoreDir, ".host-room-probe")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("the store directory %s takes no writes yet: %w", e.cfg.StoreDir, err)
	}
	defer os.Remove(path)
	defer f.Close()
	chunk := make([]byte, 256<<10)
	for n := int64(0); n < e.probe; n += int64(len(chunk)) {
		if _, err := f.Write(chunk); err != nil {
			return fmt.Errorf("the store directory %s has no room yet (%d bytes written of a %d-byte probe): %w", e.cfg.StoreDir, n, e.probe, err)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("the store directory %s has no room yet (sync of a %d-byte probe): %w", e.cfg.StoreDir, e.probe, err)
	}
	return nil
}
