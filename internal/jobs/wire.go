package jobs

import (
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agenthost/host/internal/bus"
)

// ErrorEvent is the JSON a host publishes on agent.error.<function> when a job has failed for
// good, and the body of the reply to an agent.call that failed (with Job-Status: failed). It is
// also what a call that is refused before it runs gets (no such function, a job id of another
// function), then with only job_id, function and error set.
//
//	job_id       the failed job's id (also in the Job-Id header)
//	function     the function the job ran
//	flow_id      the flow the job belongs to; left out when the call was refused before queueing
//	error        what went wrong and what to do about it, one message for people
//	attempts     how many times the job ran (1 for a job that failed on its first run)
//	exit_code    the process's exit code; null when it never ran or was killed
//	stderr_tail  the end of the run's stderr, secrets redacted; "" when there was none
type ErrorEvent struct {
	JobID      string `json:"job_id"`
	Function   string `json:"function"`
	FlowID     string `json:"flow_id,omitempty"`
	Error      string `json:"error"`
	Attempts   int    `json:"attempts"`
	ExitCode   *int   `json:"exit_code"`
	StderrTail string `json:"stderr_tail"`
}

// DeadLetter is the kept trigger of a job that failed for good: the trigger's body and headers
// as they came, on agent.dead.<function>.<job> in the AGENT_DEAD stream, with headers saying
// where it came from and why its job gave up (bus.HeaderDead*). `host dead ls --json` prints it:
//
//	job_id    the job that gave up (Job-Id)
//	function  its function (Dead-Function)
//	subject   the subject its trigger came on, where a replay publishes it again (Dead-Subject)
//	error     its last error, on one line, at most 1000 bytes (Dead-Error)
//	attempts  how many times it ran (Dead-Attempts)
//	time      when the letter was kept
//	replayed_as  the jobs that replayed it (from its job's record, while that is kept)
//
// A trigger too big to keep beside these headers keeps only its beginning, and Dead-Truncated
// says how many bytes it had.
type DeadLetter struct {
	JobID      string      `json:"job_id"`
	Function   string      `json:"function"`
	Subject    string      `json:"subject"`
	Error      string      `json:"error"`
	Attempts   int         `json:"attempts"`
	Time       time.Time   `json:"time"`
	ReplayedAs []string    `json:"replayed_as,omitempty"`
	Data       []byte      `json:"-"`
	Header     nats.Header `json:"-"` // the trigger's headers, with the ones above
	// Seq is the letter's sequence in the dead-letter stream, what removing it needs; 0 until read
	// back from the stream.
	Seq uint64 `json:"-"`
}

// Msg is the dead letter as the host keeps it: the trigger's headers, less those that would
// steer this publish (a caller's Nats-Expected-Stream would keep the letter from ever being
// written) and the reply, whose caller is long gone by the time anyone replays the letter;
// then the letter's own. maxPayload is the server's limit.
func (d *DeadLetter) Msg(flowID, msgID string, maxPayload int) *nats.Msg {
	m := nats.NewMsg(bus.DeadSubject(d.Function, d.JobID))
	m.Data = d.Data
	bus.CarryHeaders(m.Header, d.Header)
	m.Header.Set(bus.HeaderMsgID, msgID)
	m.Header.Set(bus.HeaderJobID, d.JobID)
	m.Header.Set(bus.HeaderFlowID, flowID)
	m.Header.Set(bus.HeaderDeadSubject, d.Subject)
	m.Header.Set(bus.HeaderDeadFunction, d.Function)
	m.Header.Set(bus.HeaderDeadError, oneLine(d.Error, 1000)) // headers are one line
	m.Header.Set(bus.HeaderDeadAttempts, strconv.Itoa(d.Attempts))
	// A trigger near the size limit leaves no room for the headers: keep what fits and say how
	// much there was, rather than failing to give up.
	if room := maxPayload - 8<<10; len(m.Data) > room {
		m.Header.Set(bus.HeaderDeadTruncated, strconv.Itoa(len(m.Data)))
		m.Data = m.Data[:max(room, 0)]
	}
	return m
}

// ReadDeadLetter reads a kept dead letter back.
func ReadDeadLetter(hdr nats.Header, data []byte, kept time.Time) DeadLetter {
	attempts, _ := strconv.Atoi(hdr.Get(bus.HeaderDeadAttempts))
	return DeadLetter{
		JobID: hdr.Get(bus.HeaderJobID), Function: hdr.Get(bus.HeaderDeadFunction), Subject: hdr.Get(bus.HeaderDeadSubject),
		Error: hdr.Get(bus.HeaderDeadError), Attempts: attempts, Time: kept, Data: data, Header: hdr,
	}
}

// oneLine folds s onto one line and cuts it at n bytes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// HeaderCanceledBy on a cancel request (agent.cancel.<job_id>) says who asked, for the job's
// record and the host's log.
const HeaderCanceledBy = "Canceled-By"

// CancelReply is the answer of the host running a job to a request on agent.cancel.<job_id>:
// it has stopped the job, whose final record follows.
type CancelReply struct {
	JobID string `json:"job_id"`
	Host  string `json:"host"`
}

// VouchRequest asks a host on bus.StartsVouchSubject to sign who starts a trigger the asker is
// about to publish (the hosts' CLI, which holds no key): the trigger's message id, the hex
// SHA-256 of its body, and the Started-By headers' values (ids.StartSig).
type VouchRequest struct {
	MsgID      string `json:"msg_id"`
	BodySHA256 string `json:"body_sha256"`
	StartedBy  string `json:"started_by"`
	Starter    string `json:"starter,omitempty"`
}

// VouchReply is the signature (Started-By-Sig), or why not.
type VouchReply struct {
	Sig   string `json:"sig,omitempty"`
	Error string `json:"error,omitempty"`
}
