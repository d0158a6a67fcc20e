package secrets

import (
	"context"
	"encoding/json"

	"github.com/nats-io/nats.go/jetstream"
)

// HookKeys stores the webhook signing keys (the <key> of `--hook
// <source>=hmac:<key>` and `bearer:<key>`) in their own bucket,
// HookKeysBucket, sealed like secrets but with a different additional data.
//
// It is a type of its own, without Resolve or ResolveArgs, so that the code
// that hands secrets to functions cannot be given it: a key that signs
// deliveries must not be one `$secret:` away from every function, or any
// caller could forge webhooks. Names follow ValidateName.
type HookKeys struct{ s *Store }

// OpenHookKeys creates the bucket when missing (the host calls it at start).
func OpenHookKeys(ctx context.Context, js jetstream.JetStream, key []byte, replicas int) (*HookKeys, error) {
	s, err := openNS(ctx, js, key, replicas, hookKeys)
	if err != nil {
		return nil, err
	}
	return &HookKeys{s}, nil
}

// BindHookKeys attaches to the existing bucket, for the CLI; as with Bind, a
// nil key allows List and Delete only.
func BindHookKeys(ctx context.Context, js jetstream.JetStream, key []byte) (*HookKeys, error) {
	s, err := bindNS(ctx, js, key, hookKeys)
	if err != nil {
		return nil, err
	}
	return &HookKeys{s}, nil
}

// Set stores a key's value (JSON; a string is used as its text). Values that
// CheckValue refuses are refused here too.
func (h *HookKeys) Set(ctx context.Context, name string, value json.RawMessage) error {
	return h.s.Set(ctx, name, value)
}

// Get returns a key's value; a missing key wraps ErrNotFound.
func (h *HookKeys) Get(ctx context.Context, name string) (json.RawMessage, error) {
	return h.s.Get(ctx, name)
}

// List returns the names of the stored keys, sorted. It never decrypts.
func (h *HookKeys) List(ctx context.Context) ([]string, error) { return h.s.List(ctx) }

// Delete removes a key; a missing one wraps ErrNotFound.
func (h *HookKeys) Delete(ctx context.Context, name string) error { return h.s.Delete(ctx, name) }
