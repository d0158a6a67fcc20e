package bus

import (
	"strings"

	"github.com/nats-io/nats.go"
)

// Headers the host reads and sets.
const (
	// HeaderMsgID is JetStream's deduplication header; on an incoming message it becomes the job id.
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderJobID is the id of the job a message comes from; set on everything the host publishes.
	HeaderJobID = "Job-Id"
	// HeaderFlowID is the id of the flow (the chain of jobs started by one trigger) a message
	// belongs to; set on everything the host publishes, and carried by a trigger to join a flow.
	HeaderFlowID = "Flow-Id"
	// HeaderDeployment is the deployment a flow started under (its first job's), set by hosts
	// serving deployments on everything they publish for the flow, so that its later steps
	// run that deployment's code (see package deploy).
	HeaderDeployment = "Deployment"
	// HeaderDeploymentSig is the hosts' signature of Deployment, bound to the message id and
	// body (ids.Key.DeploymentSig): a Deployment header without it is ignored (the step runs
	// what is served), so no publisher can ask for an older kept deployment's code.
	HeaderDeploymentSig = "Deployment-Sig"
	// HeaderJobStatus is the outcome on the reply to an agent.call: "succeeded" or "failed".
	HeaderJobStatus = "Job-Status"
	// HeaderParentJob names the job whose output triggered this one, for tracing flows.
	HeaderParentJob = "Parent-Job-Id"
	// HeaderReplyTo carries the inbox of an agent.call request through the durable stream, so that
	// whichever host runs the job can answer the caller.
	HeaderReplyTo = "Reply-To"
	// HeaderReplySig is the host's signature of Reply-To: a Reply-To without it is ignored, so
	// a caller cannot make a host publish a result where it chooses.
	HeaderReplySig = "Reply-Sig"
	// HeaderStream is a log line's stream, "stdout" or "stderr".
	HeaderStream = "Stream"
	// HeaderHop counts the steps a flow has taken; it bounds a flow that loops back on itself.
	HeaderHop = "Hop"
	// HeaderToolDepth is how deeply a tool call (tools:) is nested: 1 for a job's call, 2 for
	// a call its tool's job makes, and so on; absent on anything else. A job's MCP endpoint
	// sets it; a host refuses a call past its bound (--tool-depth). Anyone may write it, which
	// is harmless: a higher value only refuses sooner, a lower one is what any caller outside a
	// jail has anyway.
	HeaderToolDepth = "Tool-Depth"
	// HeaderScheduledAt is the tick time of a scheduled run (RFC 3339).
	HeaderScheduledAt = "Scheduled-At"
	// HeaderDeadSubject is the subject a dead letter's trigger was published on.
	HeaderDeadSubject = "Dead-Subject"
	// HeaderDeadError is the last error of the job that gave up, on one line.
	HeaderDeadError = "Dead-Error"
	// HeaderDeadAttempts is how many times the job ran before it gave up.
	HeaderDeadAttempts = "Dead-Attempts"
	// HeaderDeadFunction names the function whose job gave up.
	HeaderDeadFunction = "Dead-Function"
	// HeaderDeadTruncated is set on a dead letter whose trigger did not fit beside its headers:
	// the trigger's full size in bytes; the letter keeps only its beginning.
	HeaderDeadTruncated = "Dead-Truncated"
	// HeaderReplayOf names the job whose dead letter a replayed message comes from.
	HeaderReplayOf = "Replay-Of"
	// HeaderQueued says that whoever published a trigger wrote its job's queued record first
	// (host invoke, a host forwarding agent.call, POST /run): the host that takes the job reads
	// that record before writing its own. Without it the host writes first and reads only if a
	// record was there already. A hint, nothing more: a wrong one costs a round trip to the job
	// store, never a wrong verdict.
	HeaderQueued = "Job-Queued"
	// HeaderItem and HeaderItems are on each message a "next: <subject> each <expr>" edge makes:
	// which item of the list it is (from 0) and how many the list had.
	HeaderItem  = "Item-Index"
	HeaderItems = "Item-Count"
	// HeaderFunction names the function whose job published a message (its outputs), so that a
	// join knows which awaited step delivered.
	HeaderFunction = "Job-Function"
	// HeaderJoinFailed is on the trigger a host starts a joined step with when the join failed
	// (its timeout passed, or an awaited step failed for good): why. Only a host can start that
	// trigger (its message id is derived with the hosts' key), so the header cannot be forged.
	HeaderJoinFailed = "Join-Failed"
	// The headers of a decision on a step that waits for approval, sent as an agent.call of its
	// function (host approve, the dashboard, a signed link): the job, approve or reject, who
	// decided and what they said.
	HeaderApprovalOf       = "Approval-Of"
	HeaderApprovalDecision = "Approval-Decision"
	HeaderApprovalBy       = "Approval-By"
	HeaderApprovalComment  = "Approval-Comment"
	// HeaderApprovalSig is a host's signature over a decision (with Approval-Of) or over the
	// message a decided step sends its next step (which carries "approval"): ids.DecisionSig,
	// ids.ApprovalNoteSig. Approval-* headers without a valid one are dropped, and a next step
	// of an approval gate refuses an "approval" argument without one.
	HeaderApprovalSig = "Approval-Sig"
	// ApprovalHeaderPrefix starts every header of a decision: none is a caller's to set.
	ApprovalHeaderPrefix = "Approval-"
	// HeaderCaller names who asked for a job, as the caller names itself (the MCP face sets
	// "mcp <client>/<version>"); the job's record keeps it. A claim, not an authentication.
	HeaderCaller = "Job-Caller"
	// HeaderStartedBy says who or what started a trigger's flow, in words ("user ada",
	// "webhook github", "flow step plan (job 0b1…)"), HeaderStarter the user name of the person
	// who did ("" when none), and HeaderStartedBySig a host's signature over both, bound to the
	// message id and the body (ids.StartSig). A host records them as they say only with a valid
	// signature; without one Started-By is recorded as a claim ("a NATS client (says …)") and
	// Started-By-User is ignored: it is what the self-approval rule reads.
	HeaderStartedBy    = "Started-By"
	HeaderStarter      = "Started-By-User"
	HeaderStartedBySig = "Started-By-Sig"
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
	case strings.HasPrefix(subject, HostsInboxPrefix+"."):
		// The hosts' own inboxes: a reply there could pose as the answer to a host's request.
		return false
	}
	return captured == nil || !captured(subject)
}
