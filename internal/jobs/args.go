package jobs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
)

// ArgsHash is the hash a job record keeps of its trigger's payload (args_sha256): SHA-256 of
// the payload as compact JSON, so that a repeat sent with other spacing is the same call,
// while other keys, values or key order are other arguments. An empty payload is "{}", as the
// runtimes read it; a payload that is not JSON is hashed as it is (its job fails anyway).
func ArgsHash(payload []byte) string {
	var b bytes.Buffer
	switch {
	case len(bytes.TrimSpace(payload)) == 0:
		b.WriteString("{}")
	case json.Compact(&b, payload) != nil:
		b.Reset()
		b.Write(payload)
	}
	sum := sha256.Sum256(b.Bytes())
	return hex.EncodeToString(sum[:])
}

// MaxArgsBytes bounds the arguments a record keeps (args): a record must fit in a NATS message
// whatever its trigger held, as a result must (MaxResultBytes). A larger payload is kept only
// by its hash and size; a step waiting for approval keeps its arguments whatever their size,
// since its next steps are routed by them.
const MaxArgsBytes = 64 << 10

// KeepArgs records payload as the arguments the job was triggered with: its hash always, its
// size, and the payload itself as sent ($secret: references, never values) when it is JSON of
// at most MaxArgsBytes, so that the job can be shown and run again with them.
func (r *Record) KeepArgs(payload []byte) {
	r.ArgsSHA256, r.ArgsBytes, r.Args = ArgsHash(payload), len(payload), nil
	if len(payload) <= MaxArgsBytes && len(bytes.TrimSpace(payload)) > 0 && json.Valid(payload) {
		r.Args = json.RawMessage(bytes.Clone(payload))
	}
}

// SameArgs reports whether payload is what the job was triggered with. A record without a hash
// (written before records kept one) binds nothing and matches any payload.
func (r *Record) SameArgs(payload []byte) bool {
	return r.ArgsSHA256 == "" || r.ArgsSHA256 == ArgsHash(payload)
}

// ErrIDReused is what refusing a job id sent again with other arguments wraps (ReusedID).
var ErrIDReused = errors.New("an idempotency key (Nats-Msg-Id, Idempotency-Key, host invoke --id) stays bound to the arguments it first came with")

// ErrIDTaken is in the refusal of a job id that already names another function's job.
var ErrIDTaken = errors.New("the id names another function's job")

// TakenID is the refusal of a caller's job id that names a job of owner, not of function: its
// record is owner's, and answering with it would hand one caller another function's outcome.
// Every way in (a trigger, a call, POST /run, host invoke --id) refuses in these words.
func TakenID(id, function, owner string) error {
	return fmt.Errorf("job id %q already belongs to function %q, so it cannot name a job of %q: %w; send it under another id (or none)", id, owner, function, ErrIDTaken)
}

// ReusedID is the refusal of a caller's job id sent again with other arguments: the id names
// one call, arguments included, and that call's outcome is not the new one's to read.
func ReusedID(id, function string) error {
	return fmt.Errorf("job id %q of function %q was already sent with other arguments: %w; send these arguments under a new id (or none)", id, function, ErrIDReused)
}
