// Package host is the job engine: it keeps one durable consumer per function on the trigger
// stream, runs each delivered message as a job, publishes the job's outputs, records it, and
// follows the functions directory as it changes. It builds nothing it runs jobs with: a Runner
// and the rest come in Config, made by package app. It serves no HTTP: package web does, and
// asks the host only what web.Engine says (Ready, Draining, Serves, ServedNames in status.go).
//
// # One message, arrival to ack
//
//   - reload.go, serve.go, fetch.go: reload serves each function with a consumer and fetch
//     loops (serve); fetchOne takes one message when a run slot is free and hands it to handle.
//   - handle.go: handle reads the delivery into a job (newJob, its lineage read once in
//     lineage.go), decide gives it a verdict (refused or answered without running, or started
//     by the Runner, waited on through its handle, and judged).
//   - settle.go: settle ends every verdict by the same steps, from the endings table: its
//     outputs and the caller's answer (outputs.go), its record (record.go), the message.
//
// Beside that path: calls.go, how an agent.call becomes a durable trigger and is answered when
// refused; cancel.go, how a job is claimed and canceled, running (agent.cancel.<job_id>) or
// waiting (its record); presence.go, what this host announces it serves, and its heartbeat;
// host.go, Config, New, Start and Shutdown (the drain).
//
// # The state machine of a job
//
// The statuses and the moves between them are the job contract's (package jobtype). Every
// write of a job's record is a move that the store checks against the record it holds
// (jobs.Store.Move), so a host that lost a race learns it instead of overwriting: a job
// canceled while its host was slow to answer stays canceled. The store fences attempts too: an
// attempt older than the one the record names (its host cut off past the ack wait while a later
// delivery claimed the job) has its writes refused, and ends stale: its outputs already out
// stand (a later attempt's deduplicate against them), its caller is not answered and its
// message is left to the later attempt. One delivery moves its record like this:
//
//	none/queued ──▶ running ──▶ succeeded   outputs published, caller answered, message acked
//	                   ├──────▶ failed      dead: dead letter and error event, message terminated
//	                   ├──────▶ canceled    stopped on purpose: message terminated, not retried
//	                   ├──────▶ retrying    message handed back (after a backoff, or at once when
//	                                        the host drains past its deadline); its redelivery
//	                                        moves it running again, as attempt n+1
//	                   └──────▶ waiting     approve:: result out, message acked; a decision (or
//	                                        its timer) moves it succeeded (next steps started),
//	                                        failed (rejected, timed out) or canceled (approve.go)
//	none/queued/retrying ──▶ failed (a flow past --max-hops, or delivered bus.MaxDeliver times:
//	                                 never run)
//	queued/retrying ──▶ canceled (`host cancel` while it waited: the record says so, and the
//	                              delivery that comes up is dropped, unrun)
//
// A job's record exists from the moment it is accepted: `host invoke` and a host forwarding an
// agent.call write it queued before they publish. A host takes a job by moving its record
// running from the version it read, so it never overwrites a cancel (cancel.go).
//
// A function's delay: keeps its trigger queued, handed back to the stream until it is due
// (deferred). A join's messages (gather.go) and approval decisions (approve.go) are not jobs
// of their own: they are settled without a record of theirs.
//
// A queued delivery may also end without a move and without a record: a trigger whose id names
// a job of this function that has ended is answered from that job's record and acked
// (alreadyDone), or terminated when that job was canceled (dropped); one whose id names another
// function's job is refused and terminated (refused). "failed" is final: a job that failed for good is what `host dead` lists.
//
// Every end of a job is one verdict in settle.go's endings table, which says for each what is
// published, whether the caller hears, what the record becomes, how the message is settled,
// which metric counts it and what is logged.
package host
