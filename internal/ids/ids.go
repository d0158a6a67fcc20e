// Package ids makes the ids of jobs and of the messages the host publishes. Fresh ids are
// random, so nobody can guess the next one; the host's own message ids are derived with a key
// that every host of a cluster shares and no caller has, so nobody can send a message under
// one of them first (JetStream would then drop the host's as a duplicate).
package ids

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"encoding/hex"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agenthost/host/internal/bus"
)

// Safe is a job id that can stand as one NATS subject token and as a KeyValue key as it is.
var Safe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// idEncoding is xid's alphabet, so fresh and derived ids look alike and sort by time.
var idEncoding = base32.NewEncoding("0123456789abcdefghijklmnopqrstuv").WithPadding(base32.NoPadding)

// New returns a fresh job id: 20 characters of [0-9a-v], time-ordered by its first
// seconds, then 64 random bits. Random rather than a counter: a caller who could guess the
// next id could publish under it first, and the stream would drop the real job as a duplicate.
func New() string {
	var b [12]byte
	binary.BigEndian.PutUint32(b[:4], uint32(time.Now().Unix()))
	if _, err := rand.Read(b[4:]); err != nil {
		panic("crypto/rand failed: " + err.Error()) // never returns an error on Linux
	}
	return idEncoding.EncodeToString(b[:])
}

// Key derives the ids of the messages the host publishes for itself (schedule ticks,
// outputs, error events, dead letters, webhook deliveries, job ids of fan-out) and signs the
// reply inbox that a forwarded agent.call carries through the stream.
//
// JetStream drops a message whose Nats-Msg-Id it has seen, whoever sent the first one. With
// ids anyone could compute ("sched-f-<unix>"), any publisher of agent.run.* could take a tick's
// or a next step's id first and so suppress it. Derived with a key that every host of a cluster
// shares (from the secrets host key) and no caller has, they cannot be foreseen.
type Key []byte

// NewKey derives the key from the host key; with none (a host without secrets) it is
// random, so ids stay unforgeable but hosts no longer agree on them (the host warns at start).
func NewKey(hostKey []byte) Key {
	if len(hostKey) == 0 {
		k := make([]byte, 32)
		if _, err := rand.Read(k); err != nil {
			panic("crypto/rand failed: " + err.Error())
		}
		return k
	}
	mac := hmac.New(sha256.New, hostKey)
	mac.Write([]byte("agent-host message ids v1")) // a key of its own, not the secrets' key
	return mac.Sum(nil)
}

func (k Key) sum(parts ...string) []byte {
	mac := hmac.New(sha256.New, k)
	mac.Write([]byte(strings.Join(parts, "\x00")))
	return mac.Sum(nil)
}

// Derive hashes its parts into an id of the same shape as New. The same parts always give
// the same id, which is what makes outputs of a redelivered job deduplicate.
func (k Key) Derive(parts ...string) string {
	return idEncoding.EncodeToString(k.sum(parts...))[:20]
}

// ReplySig signs the caller's inbox of a forwarded call, bound to the function and job, so
// that only a host can make another host answer somewhere.
func (k Key) ReplySig(function, jobID, inbox string) string {
	return idEncoding.EncodeToString(k.sum("reply", function, jobID, inbox))
}

// ReplyTo returns the inbox a delivered trigger may be answered on: the Reply-To header when a
// host signed it for this function and job, else "" (forged says a Reply-To was there unsigned).
func (k Key) ReplyTo(function string, hdr nats.Header) (inbox string, forged bool) {
	inbox = hdr.Get(bus.HeaderReplyTo)
	if inbox == "" {
		return "", false
	}
	want := k.ReplySig(function, hdr.Get(bus.HeaderMsgID), inbox)
	if !hmac.Equal([]byte(want), []byte(hdr.Get(bus.HeaderReplySig))) {
		return "", true
	}
	return inbox, false
}

// JobID names the job that a delivered message starts for a function. A Nats-Msg-Id becomes
// the job id as the contract says (hashed only when it is not subject-safe); a message without
// one is named by its place in the stream, so every redelivery gets the same id. When one
// message triggers several functions (an on: subject), each gets its own job id.
func (k Key) JobID(msgID, stream string, seq uint64, published int64, function, subject string) string {
	id := msgID
	switch {
	case id == "":
		id = k.Derive(stream, strconv.FormatUint(seq, 10), strconv.FormatInt(published, 10))
	case !Safe.MatchString(id):
		id = k.Derive("msg-id", id)
	}
	if subject != bus.RunSubject(function) {
		id = k.Derive(id, function)
	}
	return id
}

// Next is the message id of a job's output to subject: stable across redeliveries of the job.
func (k Key) Next(jobID, subject string) string { return k.Derive(jobID, "next", subject) }

// Item is the message id of item index of a job's map onto subject: stable across
// redeliveries of the job, as Next.
func (k Key) Item(jobID, subject string, index int) string {
	return k.Derive(jobID, "each", subject, strconv.Itoa(index))
}

// Tick is the message id of one tick of a scheduled function: the same on every host, so
// the stream keeps one trigger per tick, and unknown to callers, so none can take it first.
func (k Key) Tick(function string, tick time.Time) string {
	return k.Derive("tick", function, strconv.FormatInt(tick.Unix(), 10))
}

// Hook is the message id of a webhook delivery. A sender's delivery id counts within its
// source only, and no caller can publish under it: a delivery cannot be suppressed by a message
// sent ahead with the same id, nor collide with another source's.
func (k Key) Hook(source, delivery string) string {
	if delivery == "" {
		return New()
	}
	return k.Derive("hook", source, delivery)
}

// DecisionSig signs a decision on a step that waits for approval (the Approval-* headers of a
// trigger of its function), bound to every part of it and to the trigger's message id. Only a
// host makes it (the hosts' faces ask one on bus.ApprovalsDecideSubject), so a caller who copies
// a waiting job's id from agent.result.<fn> cannot decide it, nor name the approver.
func (k Key) DecisionSig(function, target, decision, by, comment, msgID string) string {
	return idEncoding.EncodeToString(k.sum("approval-decision", function, target, decision, by, comment, msgID))
}

// ApprovalNoteSig signs the message a decided step sends its next step, which carries the
// decision under the key "approval": bound to the deciding job and the message's bytes, so the
// note cannot be moved to other arguments. It is not bound to the message id, so that replaying
// the step's dead letter (a new id, the same bytes) keeps the decision that was really made.
func (k Key) ApprovalNoteSig(parentJob string, data []byte) string {
	sum := sha256.Sum256(data)
	return idEncoding.EncodeToString(k.sum("approval-note", parentJob, string(sum[:])))
}

// DeploymentSig signs the deployment a flow's message carries (the Deployment header), bound
// to its message id and body, so that only a host can make a step run an older deployment's
// code: a publisher of agent.run.<fn> who writes Deployment: <n> gets what is served.
func (k Key) DeploymentSig(msgID, deployment string, data []byte) string {
	return idEncoding.EncodeToString(k.sum("deployment", msgID, deployment, BodySHA256(data)))
}

// StartSig signs who started a trigger (the Started-By headers), bound to its message id and a
// SHA-256 of its body (hex), so that the signature cannot be moved onto another message: a
// caller who copies a signed trigger's headers onto its own gets them recorded as a claim. sign
// is the hosts' key (Key.Derive); a face inside a host has it, any other asks a host
// (bus.StartsVouchSubject).
func StartSig(sign func(parts ...string) string, msgID, startedBy, starter, bodySHA256 string) string {
	return sign("started-by", msgID, startedBy, starter, bodySHA256)
}

// BodySHA256 is the hex SHA-256 of a message body, as StartSig binds it.
func BodySHA256(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// Vouch sets m's Started-By headers to startedBy and starter, signed with sign (StartSig); m
// must carry its message id already. It reports false, setting nothing, when it has none.
func Vouch(m *nats.Msg, sign func(parts ...string) string, startedBy, starter string) bool {
	id := m.Header.Get(bus.HeaderMsgID)
	if id == "" || startedBy == "" || sign == nil {
		return false
	}
	m.Header.Set(bus.HeaderStartedBy, startedBy)
	m.Header.Del(bus.HeaderStarter)
	if starter != "" {
		m.Header.Set(bus.HeaderStarter, starter)
	}
	m.Header.Set(bus.HeaderStartedBySig, StartSig(sign, id, startedBy, starter, BodySHA256(m.Data)))
	return true
}

// Started reads who started a delivered trigger from its Started-By headers: vouched says a
// host signed them for this very message (its id and body); otherwise startedBy is only what
// the publisher claims and starter is "".
func (k Key) Started(hdr nats.Header, data []byte) (startedBy, starter string, vouched bool) {
	startedBy, starter = hdr.Get(bus.HeaderStartedBy), hdr.Get(bus.HeaderStarter)
	if startedBy == "" {
		return "", "", false
	}
	sig := hdr.Get(bus.HeaderStartedBySig)
	if sig != "" && Verify(sig, StartSig(k.Derive, hdr.Get(bus.HeaderMsgID), startedBy, starter, BodySHA256(data))) {
		return startedBy, starter, true
	}
	return startedBy, "", false
}

// Verify reports whether sig is want, in constant time.
func Verify(sig, want string) bool { return sig != "" && hmac.Equal([]byte(sig), []byte(want)) }
