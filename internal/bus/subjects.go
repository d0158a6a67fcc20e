// Package bus holds everything the host knows about NATS: the embedded server, connecting with
// backoff, the subject and header names of the contract, and the streams, consumers and buckets
// the host keeps in JetStream.
package bus

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Subject prefixes of the contract (section 3).
const (
	RunPrefix    = "agent.run."
	CallPrefix   = "agent.call."
	ResultPrefix = "agent.result."
	ErrorPrefix  = "agent.error."
	LogsPrefix   = "agent.logs."
	// ApprovalPrefix is where a step with approve: announces that it waits for a decision.
	ApprovalPrefix = "agent.approval."
	// CancelPrefix is the hosts' control subject: a request on agent.cancel.<job_id> stops that
	// job on the host running it, which answers; the others stay silent.
	CancelPrefix = "agent.cancel."
	// SecretsSetSubject and SecretsRemoveSubject are the hosts' secret administration: a
	// request there has one host (queue group AdminQueue) seal a value with the hosts' key and
	// store it, or remove one. NATS permissions are what guard them: the request carries the
	// value in the clear to whoever may subscribe to it.
	SecretsSetSubject    = "agent.admin.secrets.set"
	SecretsRemoveSubject = "agent.admin.secrets.rm"
	// ApprovalsDecideSubject is where the hosts' faces (host approve, the dashboard, a signed
	// link) ask a host to decide a waiting step: the host signs the decision with the hosts'
	// key and queues it. Only the hosts user may publish under agent.admin.>.
	ApprovalsDecideSubject = "agent.admin.approvals.decide"
	// UserDecidePrefix starts the subject a user's own NATS login decides on
	// (UserDecideSubject): the hosts take the principal from the subject, whose publish the
	// NATS server grants to that user alone, never from the request's body.
	UserDecidePrefix = ApprovalsDecideSubject + "."
	// ApprovalsShowSubject is where a face of the hosts (host approvals show) asks a host for a
	// waiting step's approval as a person reviews it: who may decide, and each staged volume's
	// diff, which the host reads from the volume store it is configured with.
	ApprovalsShowSubject = "agent.admin.approvals.show"
	// StartsVouchSubject is where a face of the hosts that holds no key (the CLI connected as
	// the hosts user) asks a host to sign who starts a trigger (ids.StartSig); only the hosts
	// user may publish under agent.admin.>, so a host signs what it is told there.
	StartsVouchSubject = "agent.admin.starts.vouch"
	// AdminQueue is the queue group the hosts answer agent.admin.> requests in: one answer each.
	AdminQueue = "agent-admin"
)

// UserDecideSubject is where user name's own NATS login (`host users add <name> --nats`) asks
// the hosts to decide a waiting step: "agent.admin.approvals.decide.<name>".
func UserDecideSubject(name string) string { return UserDecidePrefix + name }

// WebhookSubjects are the webhook deliveries; the trigger stream keeps them so that functions
// can listen on them with on: webhook.<source>.
const WebhookSubjects = "webhook.>"

// RunSubject is the durable trigger subject of a function.
func RunSubject(name string) string { return RunPrefix + name }

// CallSubject is the request-reply subject of a function.
func CallSubject(name string) string { return CallPrefix + name }

// ResultSubject is where every successful run of a function is published.
func ResultSubject(name string) string { return ResultPrefix + name }

// ApprovalSubject is where a step of name that waits for a decision is announced.
func ApprovalSubject(name string) string { return ApprovalPrefix + name }

// ErrorSubject is where a run that failed for good is published.
func ErrorSubject(name string) string { return ErrorPrefix + name }

// Results and error events travel on subjects of their own before anyone hears them (see
// EnsureResultStream): the host publishes agent.result.<fn> as OutputsIn + "result.<fn>", which
// only the results stream captures and which comes out, stored once, as agent.result.<fn>; and,
// for the functions listening on it, as TriggersIn + "result.<fn>", which only the trigger
// stream captures. No caller may publish on either (see CallerPermissions), so no caller can
// forge a result into the stream or a trigger of the functions listening on results.
const (
	OutputsIn  = "$AH.out."
	TriggersIn = "$AH.on."
	// outputsRoot is what OutputsIn and TriggersIn stand in for.
	outputsRoot = "agent."
)

// IsOutput reports whether subject (or pattern) names results or error events: agent.result.…
// or agent.error.…, which a stream captures under OutputsIn or TriggersIn instead.
func IsOutput(subject string) bool {
	return strings.HasPrefix(subject, ResultPrefix) || strings.HasPrefix(subject, ErrorPrefix)
}

// OutputIn is the subject the host publishes the output subject on for the results stream.
func OutputIn(subject string) string { return OutputsIn + strings.TrimPrefix(subject, outputsRoot) }

// TriggerIn is the subject (or pattern) that the trigger stream captures for a function
// listening on subject; every other subject is captured as it is.
func TriggerIn(subject string) string {
	if !IsOutput(subject) {
		return subject
	}
	return TriggersIn + strings.TrimPrefix(subject, outputsRoot)
}

// LogsSubject carries the output lines of one job.
func LogsSubject(name, jobID string) string { return LogsPrefix + name + "." + jobID }

// CancelSubject is where a cancel of a job is asked for.
func CancelSubject(jobID string) string { return CancelPrefix + jobID }

// ValidSubject reports whether s is a well-formed subject to subscribe to, by nats-server's
// rules (dot-separated non-empty tokens without white space, ">" only as the last token), and
// the host's stricter one: "*" and ">" only as whole tokens. The server takes "orders*" as a
// literal token, but in a function's on: it is nearly always a wildcard written wrong.
func ValidSubject(s string) bool {
	if !server.IsValidSubject(s) {
		return false
	}
	for t := range strings.SplitSeq(s, ".") {
		if t != "*" && t != ">" && strings.ContainsAny(t, "*>") {
			return false
		}
	}
	return true
}

// SubjectMatches reports whether the literal subject subj is matched by the pattern pat.
func SubjectMatches(pat, subj string) bool { return server.SubjectMatchesFilter(subj, pat) }

// subsumes reports whether every subject matched by b is matched by a: the server's subset
// match takes wildcards on both sides.
func subsumes(a, b string) bool { return server.SubjectMatchesFilter(b, a) }

// MergeSubjects returns the subjects sorted, without duplicates and without any subject that
// another one already covers, because JetStream refuses a stream whose subjects overlap.
func MergeSubjects(subjects []string) []string {
	in := slices.Clone(subjects)
	slices.Sort(in)
	// After Compact no two entries are equal, so two subjects never cover each other both ways.
	in = slices.Compact(in)
	out := make([]string, 0, len(in))
	for i, s := range in {
		covered := false
		for j, o := range in {
			if i != j && subsumes(o, s) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, s)
		}
	}
	return out
}

// AdminSubscribe answers every subject with handler in the hosts' queue group AdminQueue (one
// host answers each request): all of them, or, when one cannot be subscribed, none.
func AdminSubscribe(nc *nats.Conn, handler nats.MsgHandler, subjects ...string) ([]*nats.Subscription, error) {
	var subs []*nats.Subscription
	for _, subject := range subjects {
		sub, err := nc.QueueSubscribe(subject, AdminQueue, handler)
		if err != nil {
			for _, s := range subs {
				_ = s.Unsubscribe()
			}
			return nil, fmt.Errorf("subscribe to %s: %w", subject, err)
		}
		subs = append(subs, sub)
	}
	return subs, nil
}
