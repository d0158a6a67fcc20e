package bus

import (
	"strings"

	"github.com/nats-io/nats.go"
)

// CarryHeaders copies a caller's headers onto a message the host publishes with its own rights
// (a forwarded call, a dead letter), leaving out those that would steer that publish: the
// JetStream control headers (Nats-Expected-Stream, Nats-Expected-Last-Sequence, Nats-Rollup,
// Nats-TTL, Nats-Msg-Id, …), which could make the host's publish fail for good or act on a
// stream, and the reply headers only a host may set.
func CarryHeaders(dst, src nats.Header) {
	for k, v := range src {
		if strings.HasPrefix(strings.ToLower(k), "nats-") || k == HeaderReplyTo || k == HeaderReplySig {
			continue
		}
		dst[k] = append([]string(nil), v...)
	}
}

// SafeReply reports whether a core request's reply subject is one the host may answer on: an
// inbox, not a subject that acts on something. A caller choosing `--reply '$KV.agent_jobs.x'`
// or `--reply agent.run.victim` would otherwise have the host write a job record or start a
// function with the host's own rights. captured reports subjects a host stream stores.
func SafeReply(subject string, captured func(string) bool) bool {
	switch {
	case subject == "" || !ValidSubject(subject) || strings.ContainsAny(subject, "*>"):
		return false
	case strings.HasPrefix(subject, "$"): // $JS, $KV, $O, $SYS: the server's APIs
		return false
	case strings.HasPrefix(subject, "agent.") || strings.HasPrefix(subject, "webhook."):
		return false
	}
	return captured == nil || !captured(subject)
}
