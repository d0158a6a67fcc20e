package jobs

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
