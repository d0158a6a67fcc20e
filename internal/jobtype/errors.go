package jobtype

import (
	"context"
	"errors"
)

// The engine tells three kinds of failure apart, because each asks for something else:
//
//   - terminal: the input or the function is wrong, and running it again gives the same
//     answer: the job fails for good, whatever its retries say;
//   - unavailable: something the job depends on (its volume store) is down, not the job: it
//     is handed back for later, whatever its retries say;
//   - canceled: someone stopped it on purpose: it is not run again.
//
// Any other error is the job's own, and its retries decide.

// TerminalError is a failure that no retry can fix.
type TerminalError struct{ Err error }

func (e *TerminalError) Error() string { return e.Err.Error() }
func (e *TerminalError) Unwrap() error { return e.Err }

// Terminal marks err as a failure that no retry can fix; nil stays nil.
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return &TerminalError{Err: err}
}

// IsTerminal reports whether err is a failure that retrying cannot fix: a *TerminalError in
// its chain, or an error of another package's that says so with a Terminal() bool method (the
// runtimes' argument, definition and result errors), so that those packages need not import
// this one to be understood.
func IsTerminal(err error) bool {
	if errors.As(err, new(*TerminalError)) {
		return true
	}
	var t interface{ Terminal() bool }
	return errors.As(err, &t) && t.Terminal()
}

// UnavailableError is a failure of something the job depends on, not of the job.
type UnavailableError struct{ Err error }

func (e *UnavailableError) Error() string { return e.Err.Error() }
func (e *UnavailableError) Unwrap() error { return e.Err }

// IsUnavailable reports whether err is a failure of something the job depends on.
func IsUnavailable(err error) bool { return errors.As(err, new(*UnavailableError)) }

// IsCanceled reports whether err says the run was stopped on purpose: its context was
// canceled (Handle.Stop, `host cancel`, a host that stops running jobs).
func IsCanceled(err error) bool { return errors.Is(err, context.Canceled) }
