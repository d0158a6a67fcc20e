package jobtype

import (
	"fmt"
	"slices"
)

// Status is where a job is in its life, as its record says.
type Status string

const (
	// None is the status of a job that has no record yet: the state every job starts from.
	None Status = ""
	// Queued is a trigger accepted and not yet started: written by `host invoke` before it
	// publishes, and by a host forwarding an agent.call; a record never goes back to it.
	Queued  Status = "queued"
	Running Status = "running"
	// Waiting is a step that succeeded and waits for a person's decision (approve:) before its
	// next steps get its result.
	Waiting   Status = "waiting"
	Retrying  Status = "retrying" // failed an attempt; redelivered after a backoff
	Succeeded Status = "succeeded"
	Failed    Status = "failed"   // failed for good: its error event is published, its trigger kept as a dead letter
	Canceled  Status = "canceled" // stopped on purpose before it finished; not retried
	// Superseded is a message of a debounce: burst that a newer message of its key ran in
	// place of (its record's superseded_by); it never ran.
	Superseded Status = "superseded"
)

// Final reports whether the job will not change any more.
func (s Status) Final() bool {
	return s == Succeeded || s == Failed || s == Canceled || s == Superseded
}

// moves is every legal move of a stored record. The store refuses any other (jobs.Store.Move),
// checked against the status it holds, not against what a writer believes it holds.
//
//	none ──▶ queued ──▶ running ──▶ succeeded
//	  │        │          ├──────▶ failed
//	  │        │          ├──────▶ canceled
//	  │        │          ├──────▶ retrying ──▶ running (its redelivery), failed, retrying, canceled
//	  │        │          ├──────▶ running (a new attempt, after its host died)
//	  │        │          └──────▶ waiting ──▶ succeeded (approved), failed (rejected, timed out), canceled
//	  │        ├──▶ failed, canceled, retrying, superseded
//	  └──▶ running, failed, retrying, superseded
//	retrying ──▶ superseded (a debounce: message whose key got a newer one while it waited)
var moves = map[Status][]Status{
	// None: a trigger nobody queued (a flow's next step, a webhook, a schedule) is claimed
	// running by the host that takes it, or refused (failed) before it runs; retrying when
	// that refusal's error event could not be published.
	// Superseded: a debounce: message nobody queued that a newer one of its key replaced.
	None: {Queued, Running, Failed, Retrying, Superseded},
	// Failed: refused before it ran (a runaway flow, delivered too often); Retrying: its error
	// event could not be published, so it runs again; Canceled: `host cancel` before it ran.
	// Superseded: a debounce: message that a newer one of its key replaced before it started.
	Queued: {Running, Failed, Retrying, Canceled, Superseded},
	// Running again: the host that ran the last attempt died with it, and JetStream handed
	// the message to another after the ack wait.
	Running: {Succeeded, Failed, Retrying, Canceled, Running, Waiting},
	// A step waiting for approval has run: a decision ends it (approved: succeeded, its next
	// steps started; rejected or timed out: failed), or `host cancel` does.
	Waiting: {Succeeded, Failed, Canceled},
	// A job waiting for its retry is not running anywhere: its redelivery takes it again (or
	// refuses it: failed, or retrying once more when the refusal could not be published), and
	// `host cancel` ends it in its record, its redelivery then dropped. An earlier attempt that
	// ends late (its host cut off past the ack wait, the message given to another meanwhile)
	// does not end it: the store refuses a stale attempt's write whatever its status
	// (jobs.StaleAttemptError), and that host leaves the message to the later attempt.
	Retrying: {Running, Failed, Retrying, Canceled, Superseded},
}

// To checks that a record may move from s to to, and says which moves s allows when it may
// not.
func (s Status) To(to Status) error {
	if slices.Contains(moves[s], to) {
		return nil
	}
	return &IllegalMoveError{From: s, To: to}
}

// IllegalMoveError is a move the state machine does not allow: a record at From cannot become
// To. From is what the store holds, so a writer that lost a race (a job canceled while it ran)
// learns what won.
type IllegalMoveError struct {
	ID       string // the job, when known
	From, To Status
}

func (e *IllegalMoveError) Error() string {
	from := string(e.From)
	if e.From == None {
		from = "no record"
	}
	job := "a job"
	if e.ID != "" {
		job = "job " + e.ID
	}
	if e.From.Final() {
		return fmt.Sprintf("%s is already %s, so it cannot become %s: a record that has ended does not change", job, from, e.To)
	}
	return fmt.Sprintf("%s at %s cannot become %s (from %s a job goes to %v)", job, from, e.To, from, moves[e.From])
}
