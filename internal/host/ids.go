package host

import (
	"crypto/sha256"
	"encoding/base32"
	"regexp"
	"strconv"
	"strings"

	"github.com/agenthost/host/internal/bus"
	"github.com/rs/xid"
)

// safeID is a job id that can stand as one NATS subject token and as a KeyValue key as it is.
var safeID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

var idEncoding = base32.NewEncoding("0123456789abcdefghijklmnopqrstuv").WithPadding(base32.NoPadding)

// NewJobID returns a fresh, time-ordered job id (20 characters of [0-9a-v]).
func NewJobID() string { return xid.New().String() }

// derivedID hashes its parts into an id of the same shape as NewJobID. The same parts always
// give the same id, which is what makes outputs of a redelivered job deduplicate.
func derivedID(parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return idEncoding.EncodeToString(sum[:])[:20]
}

// jobIDFor names the job that a delivered message starts for a function. A Nats-Msg-Id becomes
// the job id as the contract says (hashed only when it is not subject-safe); a message without
// one is named by its place in the stream, so every redelivery gets the same id. When one
// message triggers several functions (an on: subject), each gets its own job id.
func jobIDFor(msgID, stream string, seq uint64, published int64, function, subject string) string {
	id := msgID
	switch {
	case id == "":
		id = derivedID(stream, strconv.FormatUint(seq, 10), strconv.FormatInt(published, 10))
	case !safeID.MatchString(id):
		id = derivedID("msg-id", id)
	}
	if subject != bus.RunSubject(function) {
		id = derivedID(id, function)
	}
	return id
}

// nextMsgID is the message id of a job's output to subject: stable across redeliveries of the job.
func nextMsgID(jobID, subject string) string { return derivedID(jobID, "next", subject) }
