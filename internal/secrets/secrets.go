// Package secrets stores the host's secrets in a JetStream KeyValue bucket,
// encrypted at rest, and resolves `$secret:<name>` references inside the host
// at run time.
//
// The contract with users: secrets never travel in payloads. An argument whose
// value is exactly the string "$secret:<name>" and an `env: NAME=$secret:name`
// line are replaced inside the host, just before the run, by the stored secret
// (a JSON value). No secret value may appear in a job record, an event, a log
// line or a metric label; every resolution therefore returns a Redactor that
// the caller runs over whatever it captures from the job (stdout, stderr,
// results, error messages) before storing or publishing it.
//
// Encryption is envelope encryption with a host key (the key-encryption key,
// see LoadKey) that is never stored beside the data: each value is sealed with
// a fresh random 256-bit data key (AES-256-GCM), and the data key is sealed
// with the host key (AES-256-GCM). Both seals use the secret's name as
// additional authenticated data, so a stored value copied under another name
// does not decrypt. Anyone who can read the bucket (every NATS user with
// access to the JetStream API) sees names and ciphertexts only; names are not
// secret.
package secrets

import (
	"context"
	"crypto/cipher"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/agenthost/host/internal/bus"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrNotFound is wrapped by the errors for a secret that is not stored.
var ErrNotFound = errors.New("secret not found")

// Bucket is the KeyValue bucket holding the encrypted secrets, keyed by name.
const Bucket = "agent_secrets"

// HookKeysBucket holds the webhook signing keys (HMAC keys, bearer tokens),
// apart from the function secrets: nothing that resolves "$secret:" or "env:"
// is ever bound to it, so no caller and no function can have a key sent into
// a job.
const HookKeysBucket = "agent_hook_keys"

// KeySize is the size of the host key and of every data key: AES-256.
const KeySize = 32

// RefPrefix starts a reference to a secret in an argument or an env line.
const RefPrefix = "$secret:"

// nameRe is also a valid KeyValue key (KeyValue keys allow [-/_=.a-zA-Z0-9]),
// so a name is stored as it is; validName adds the key rules on dots.
var nameRe = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.=/-]{0,127}$`)

// ValidateName checks a secret name: 1 to 128 characters from letters,
// digits and _ . = / -, not starting with one of . = / -, and (because names
// are KeyValue keys) neither ending with a dot nor holding two dots in a row.
func ValidateName(name string) error {
	if !nameRe.MatchString(name) || strings.HasSuffix(name, ".") || strings.Contains(name, "..") {
		return fmt.Errorf("invalid secret name %q: use 1 to 128 characters from letters, digits and _ . = / -, "+
			"starting with a letter, digit or _, not ending with a dot and without two dots in a row", name)
	}
	return nil
}

// Store reads and writes the secrets bucket. It is safe for concurrent use.
type Store struct {
	kv    jetstream.KeyValue
	kek   cipher.AEAD // AES-256-GCM with the host key; nil when bound without one (List and Delete only)
	kekID string
	ns    namespace
	// bucketKEK is the id of the hosts' key, as the bucket's metadata records it (see
	// MetaKEKID); Set refuses to seal with any other, so that a value sealed with a key no
	// host holds is refused when it is set rather than found unreadable when a job needs it.
	bucketKEK string
}

// MetaKEKID is the bucket metadata entry naming the id (KeyID) of the key the hosts seal
// with. The first host of this version to open the bucket records its own; a later host with
// another key leaves it and is told (KeyMismatch).
const MetaKEKID = "agent_kek_id"

// namespace is one bucket of sealed values: the function secrets, or the
// webhook keys kept apart from them.
type namespace struct {
	bucket, desc string
	// aad prefixes the name in the seals' additional data, so that a value
	// copied from one bucket into the other does not decrypt there.
	aad string
	// setCmd is the CLI command that sets a value, for error messages.
	setCmd string
	what   string // "secret" or "webhook key"
}

var (
	functionSecrets = namespace{bucket: Bucket, desc: "host secrets, envelope-encrypted with the host key",
		setCmd: "host secrets set", what: "secret"}
	hookKeys = namespace{bucket: HookKeysBucket, desc: "webhook signing keys, envelope-encrypted with the host key; never resolved for functions",
		aad: "hook-key:", setCmd: "host secrets set --hook", what: "webhook key"}
)

// Open creates the bucket when missing (the host calls it at start) and
// returns a Store using key, the 32-byte host key from LoadKey.
func Open(ctx context.Context, js jetstream.JetStream, key []byte, replicas int) (*Store, error) {
	return openNS(ctx, js, key, replicas, functionSecrets)
}

func openNS(ctx context.Context, js jetstream.JetStream, key []byte, replicas int, ns namespace) (*Store, error) {
	s, err := newStore(key, ns)
	if err != nil {
		return nil, err
	}
	// The bucket keeps the key id it already records: a host started with the wrong key must
	// not make the others' values look wrongly keyed.
	s.bucketKEK = s.kekID
	if old, err := js.KeyValue(ctx, ns.bucket); err == nil {
		if st, err := old.Status(ctx); err == nil && st.Metadata()[MetaKEKID] != "" {
			s.bucketKEK = st.Metadata()[MetaKEKID]
		}
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      ns.bucket,
		Description: ns.desc,
		Metadata:    map[string]string{MetaKEKID: s.bucketKEK},
		// One revision: an overwritten or removed secret must not linger
		// in the stream's history.
		History:  1,
		Storage:  jetstream.FileStorage,
		Replicas: bus.Replicas(ctx, js, "KV_"+ns.bucket, replicas),
	})
	if err != nil {
		return nil, fmt.Errorf("open %s bucket %s: %w", ns.what, ns.bucket, err)
	}
	s.kv = kv
	return s, nil
}

// Bind attaches to the existing bucket, for the CLI. key may be nil when only
// List and Delete are used (they need no decryption); Set, Get and the
// Resolve methods then fail with an error saying a host key is needed.
func Bind(ctx context.Context, js jetstream.JetStream, key []byte) (*Store, error) {
	return bindNS(ctx, js, key, functionSecrets)
}

func bindNS(ctx context.Context, js jetstream.JetStream, key []byte, ns namespace) (*Store, error) {
	s := &Store{ns: ns}
	if key != nil {
		var err error
		if s, err = newStore(key, ns); err != nil {
			return nil, err
		}
	}
	kv, err := js.KeyValue(ctx, ns.bucket)
	if err != nil {
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, fmt.Errorf("%s bucket %s not found: has a host (`host serve`) of this version ever run against this NATS?", ns.what, ns.bucket)
		}
		return nil, fmt.Errorf("open %s bucket %s: %w", ns.what, ns.bucket, err)
	}
	s.kv = kv
	if st, err := kv.Status(ctx); err == nil {
		s.bucketKEK = st.Metadata()[MetaKEKID]
	}
	return s, nil
}

// KeyMismatch says, when it is not nil, that the loaded key is not the one the bucket's
// values are sealed with (the hosts'): Set refuses, and Get fails on every value.
func (s *Store) KeyMismatch() error {
	if s.kek == nil || s.bucketKEK == s.kekID {
		return nil
	}
	if s.bucketKEK == "" {
		return fmt.Errorf("%s bucket %s records no host key yet: start a host (`host serve`) of this version once, "+
			"or set the value through the host (the default, without --local)", s.ns.what, s.ns.bucket)
	}
	return fmt.Errorf("the loaded key (kek_id %s) is not the hosts' key (kek_id %s, recorded in bucket %s): "+
		"a value sealed with it could not be read by any host, so it is refused; set it through the host "+
		"(the default, without --local), or load the hosts' key", s.kekID, s.bucketKEK, s.ns.bucket)
}

func newStore(key []byte, ns namespace) (*Store, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("secrets: host key must be %d bytes, got %d (load it with LoadKey)", KeySize, len(key))
	}
	aead, err := newGCM(key)
	if err != nil {
		return nil, err
	}
	return &Store{kek: aead, kekID: KeyID(key), ns: ns}, nil
}

// KeyID identifies a host key without revealing it: the hex of the first 8
// bytes of its SHA-256. It is stored with every value so that a wrong key is
// reported as such rather than as corruption.
func KeyID(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:8])
}

func (s *Store) needKey(op, name string) error {
	if s.kek == nil {
		return fmt.Errorf("%s %s %q: no host key loaded: reading or writing one needs the host key (see LoadKey)", op, s.ns.what, name)
	}
	return nil
}

// Set stores value, which must be valid JSON, under name. It overwrites any
// previous value.
func (s *Store) Set(ctx context.Context, name string, value json.RawMessage) error {
	if err := s.ns.check(name, value); err != nil {
		return err
	}
	if err := s.needKey("set", name); err != nil {
		return err
	}
	if err := s.KeyMismatch(); err != nil {
		return fmt.Errorf("set %s %q: %w", s.ns.what, name, err)
	}
	blob, err := s.seal(name, value)
	if err != nil {
		return fmt.Errorf("set %s %q: %w", s.ns.what, name, err)
	}
	if _, err := s.kv.Put(ctx, name, blob); err != nil {
		return fmt.Errorf("set %s %q: store in bucket %s: %w", s.ns.what, name, s.ns.bucket, err)
	}
	return nil
}

// CheckSet is what Set checks of a name and value before it seals anything, for a form to
// refuse what the host would, with the host's very words; hook checks as for a webhook key.
func CheckSet(name string, value json.RawMessage, hook bool) error {
	if hook {
		return hookKeys.check(name, value)
	}
	return functionSecrets.check(name, value)
}

func (ns namespace) check(name string, value json.RawMessage) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	if !json.Valid(value) {
		// The value must not be echoed: it is the secret.
		return fmt.Errorf("set %s %q: the value is not valid JSON (a string needs its quotes: '\"text\"')", ns.what, name)
	}
	if err := CheckValue(value); err != nil {
		return fmt.Errorf("set %s %q: %w", ns.what, name, err)
	}
	return nil
}

// Get returns the decrypted value of name. A missing secret is an error
// wrapping ErrNotFound that names the secret and says how to set it.
func (s *Store) Get(ctx context.Context, name string) (json.RawMessage, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if err := s.needKey("read", name); err != nil {
		return nil, err
	}
	e, err := s.kv.Get(ctx, name)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			return nil, s.notFound(name)
		}
		return nil, fmt.Errorf("read %s %q from bucket %s: %w", s.ns.what, name, s.ns.bucket, err)
	}
	v, err := s.open(name, e.Value())
	if err != nil {
		return nil, fmt.Errorf("read %s %q: %w", s.ns.what, name, err)
	}
	return v, nil
}

func (s *Store) notFound(name string) error {
	return &notFoundError{fmt.Sprintf("%s %q not found: set it with %s %s '<json>'", s.ns.what, name, s.ns.setCmd, name)}
}

// notFoundError is an ErrNotFound with a message of its own, which would
// otherwise end with ErrNotFound's text a second time.
type notFoundError struct{ msg string }

func (e *notFoundError) Error() string { return e.msg }
func (e *notFoundError) Unwrap() error { return ErrNotFound }

// List returns the names of the stored secrets, sorted. It never decrypts.
func (s *Store) List(ctx context.Context) ([]string, error) {
	names, err := s.kv.Keys(ctx)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return []string{}, nil
		}
		return nil, fmt.Errorf("list %ss in bucket %s: %w", s.ns.what, s.ns.bucket, err)
	}
	return names, nil // Keys sorts and removes duplicates
}

// Delete removes name and every stored revision of it. Removing a secret that
// does not exist is an error wrapping ErrNotFound.
func (s *Store) Delete(ctx context.Context, name string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	if _, err := s.kv.Get(ctx, name); err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			return &notFoundError{fmt.Sprintf("remove %s %q: no such %s (see %s)", s.ns.what, name, s.ns.what,
				strings.Replace(s.ns.setCmd, " set", " ls", 1))}
		}
		return fmt.Errorf("remove %s %q: %w", s.ns.what, name, err)
	}
	// Purge, not Delete: a delete marker alone would leave older revisions
	// in the stream if the bucket's history were ever raised.
	if err := s.kv.Purge(ctx, name); err != nil {
		return fmt.Errorf("remove %s %q from bucket %s: %w", s.ns.what, name, s.ns.bucket, err)
	}
	return nil
}

// CheckValue refuses a value that could not be redacted from a job's output:
// a string or number shorter than MinRedactLen bytes, at the top or as a leaf
// of an object or array (redacting "42" or "eu" would destroy ordinary output,
// and not redacting them would leak them), a string that reads as a JSON
// keyword ("true", "null": the same, in every JSON output), and a bare
// boolean or null, which carry no secret. Booleans and null inside an object are allowed: they are
// settings beside the secret, not secrets. The error never holds the value.
func CheckValue(value json.RawMessage) error {
	v, err := decodeJSON(value)
	if err != nil {
		return errors.New("the value is not valid JSON (a string needs its quotes: '\"text\"')")
	}
	switch v.(type) {
	case bool, nil:
		return fmt.Errorf("a bare %s is not a secret (it cannot be hidden in output): store a string, a number, or an object holding the setting", jsonKind(v))
	}
	var walk func(v any, path string) error
	walk = func(v any, path string) error {
		var n int
		switch x := v.(type) {
		case string:
			if isKeyword(x) {
				where := "the value"
				if path != "" {
					where = "the leaf " + strings.TrimPrefix(path, ".")
				}
				return fmt.Errorf("%s is a string that reads as a JSON keyword (true, false or null): it cannot be redacted from job output "+
					"without hiding that keyword in every JSON the jobs print, so it is refused; store a plain boolean or null beside the secret, "+
					"or pass it as an ordinary argument", where)
			}
			n = len(x)
		case json.Number:
			n = len(x.String())
		case map[string]any:
			for _, k := range slices.Sorted(maps.Keys(x)) {
				if err := walk(x[k], path+"."+k); err != nil {
					return err
				}
			}
			return nil
		case []any:
			for i, e := range x {
				if err := walk(e, fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
			return nil
		default:
			return nil
		}
		if n >= MinRedactLen {
			return nil
		}
		where := "the value"
		if path != "" {
			where = "the leaf " + strings.TrimPrefix(path, ".")
		}
		return fmt.Errorf("%s is a %s of %d characters, shorter than %d: a secret that short cannot be redacted from job output "+
			"without destroying ordinary text, so it is refused; use a longer value, "+
			"or pass a short non-secret setting as an ordinary argument", where, jsonKind(v), n, MinRedactLen)
	}
	return walk(v, "")
}

func jsonKind(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case json.Number:
		return "number"
	case bool:
		return "boolean"
	case nil:
		return "null"
	}
	return "value"
}
