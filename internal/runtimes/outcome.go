package runtimes

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"

	"github.com/agenthost/host/internal/jailfs"
)

// ArgumentError means the payload does not fit main's signature, e.g. a
// required parameter is missing. Retrying with the same payload cannot help.
type ArgumentError struct {
	Message string // e.g. `missing required argument "name" for main(name, greeting="Hello")`
}

func (e *ArgumentError) Error() string { return e.Message }

// Terminal says that retrying cannot fix it (see jobtype.IsTerminal).
func (e *ArgumentError) Terminal() bool { return true }

// DefinitionError means the script cannot be called at all: it defines no
// main, main is not callable, or the script does not parse. Never retried.
type DefinitionError struct {
	Message string
}

func (e *DefinitionError) Error() string { return e.Message }

// Terminal says that retrying cannot fix it (see jobtype.IsTerminal).
func (e *DefinitionError) Terminal() bool { return true }

// ScriptError means the script ran and failed: main raised, importing the
// script raised (a missing module, an error in top-level code), the script
// exited non-zero, or the process died. Retried per the function's retries.
type ScriptError struct {
	ExitCode int    // the process's exit code; -1 when killed by a signal
	Message  string // one line, e.g. "ValueError: boom"
}

func (e *ScriptError) Error() string { return e.Message }

// ResultError means main returned a value that is not JSON-serialisable
// (a set, a BigInt, a function, NaN in Python). Never retried.
type ResultError struct {
	Message string
}

func (e *ResultError) Error() string { return e.Message }

// Terminal says that retrying cannot fix it (see jobtype.IsTerminal).
func (e *ResultError) Terminal() bool { return true }

// shimError is the content of error.json.
type shimError struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// IODir is a run's io directory as the host reads it: the jail wrote it, so a file there is
// read only if it is a regular file (never through a link, never a fifo or a device), and only
// up to a bound. *jailfs.Dir is one.
type IODir interface {
	// ReadRegular reads rel, of at most max bytes; an absent file's error wraps
	// fs.ErrNotExist, one that is no regular file jailfs.ErrNotRegular, one over max
	// jailfs.ErrTooLarge.
	ReadRegular(rel string, max int64) ([]byte, error)
}

// maxErrorFile bounds error.json: the shims cap its message far below.
const maxErrorFile = 64 << 10

// Outcome reads what a finished run produced. io is the run's io directory; maxResult the
// largest result the host can publish (the shims write it compact); lastLine is the last
// non-empty stdout line (used by Bash and Exec); exitCode is the process's exit code (-1 if
// killed by a signal).
//
// On success it returns the result as valid JSON (`null` when main returned
// nothing, or a bash script printed nothing). Failures are *ArgumentError,
// *DefinitionError, *ResultError (terminal, see jobtype.IsTerminal) or *ScriptError. An io file that
// is a link, a fifo, a device or over its bound is a *ResultError naming the file.
func Outcome(kind Kind, io IODir, maxResult int64, lastLine []byte, exitCode int) (json.RawMessage, error) {
	switch kind {
	case Python, Bun:
		return shimOutcome(io, maxResult, exitCode)
	case Bash, Exec:
		return lineOutcome(lastLine, exitCode)
	default:
		return nil, fmt.Errorf("runtimes: Outcome: unknown runtime %q", kind)
	}
}

func shimOutcome(io IODir, maxResult int64, exitCode int) (json.RawMessage, error) {
	// error.json first: it says what went wrong more precisely than the
	// exit code, which a jail or a signal may have rewritten.
	data, err := io.ReadRegular(ErrorFile, maxErrorFile)
	switch {
	case err == nil:
		return nil, shimFailure(data, exitCode)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, ioFileErr(ErrorFile, maxErrorFile, err)
	}

	if exitCode != 0 {
		// The process died without the shim getting a word in: killed (by
		// the timeout, the OOM killer), the interpreter missing, or a crash.
		return nil, &ScriptError{ExitCode: exitCode, Message: exitMessage(exitCode) + " without a result"}
	}

	data, err = io.ReadRegular(ResultFile, maxResult)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, &ScriptError{ExitCode: exitCode, Message: "the script exited with code 0 but wrote no result"}
	case err != nil:
		return nil, ioFileErr(ResultFile, maxResult, err)
	}
	data = bytes.TrimSpace(data)
	if !json.Valid(data) {
		return nil, &ResultError{Message: ResultFile + " does not hold valid JSON"}
	}
	return json.RawMessage(data), nil
}

// ioFileErr is the terminal error of an io file the host refused to read: what it was and the
// rule, without the host's path of it.
func ioFileErr(name string, max int64, err error) error {
	switch {
	case errors.Is(err, jailfs.ErrTooLarge):
		if name == ResultFile {
			return &ResultError{Message: fmt.Sprintf("result: %s holds more than the %d bytes a NATS message can carry; write large outputs to a volume and return a reference", name, max)}
		}
		return &ResultError{Message: fmt.Sprintf("%s is over %d bytes; the host reads no more", name, max)}
	case errors.Is(err, jailfs.ErrNotRegular), errors.Is(err, jailfs.ErrLink):
		var pe *fs.PathError
		why := err.Error()
		if errors.As(err, &pe) {
			why = pe.Err.Error()
		}
		return &ResultError{Message: fmt.Sprintf("%s in the io directory is refused: %s; the host reads only a regular file the job wrote itself, never through a link", name, why)}
	}
	return fmt.Errorf("runtimes: read %s: %w", name, err)
}

func shimFailure(data []byte, exitCode int) error {
	var e shimError
	if err := json.Unmarshal(data, &e); err != nil || e.Message == "" {
		return &ScriptError{ExitCode: exitCode, Message: exitMessage(exitCode) + " and left an unreadable " + ErrorFile}
	}
	switch e.Kind {
	case "argument":
		return &ArgumentError{Message: e.Message}
	case "definition":
		return &DefinitionError{Message: e.Message}
	case "result":
		return &ResultError{Message: e.Message}
	default: // "exception"
		if exitCode == 0 {
			// Cannot happen with the shims, but a failure must not read as
			// "exit code 0" to whoever looks at the job.
			exitCode = ExitException
		}
		return &ScriptError{ExitCode: exitCode, Message: e.Message}
	}
}

func lineOutcome(lastLine []byte, exitCode int) (json.RawMessage, error) {
	if exitCode != 0 {
		return nil, &ScriptError{ExitCode: exitCode, Message: exitMessage(exitCode)}
	}
	line := bytes.TrimRight(lastLine, "\r\n")
	if len(bytes.TrimSpace(line)) == 0 {
		return json.RawMessage("null"), nil
	}
	if json.Valid(line) {
		var buf bytes.Buffer
		if err := json.Compact(&buf, line); err == nil {
			return json.RawMessage(buf.Bytes()), nil
		}
	}
	// Plain text becomes a JSON string. No HTML escaping: "<" should stay "<"
	// for whoever reads the result.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(string(line)); err != nil {
		return nil, fmt.Errorf("runtimes: Outcome: %w", err)
	}
	return json.RawMessage(bytes.TrimRight(buf.Bytes(), "\n")), nil
}

func exitMessage(code int) string {
	switch {
	case code < 0:
		return "the script was killed by a signal"
	case code == 127:
		return "the script exited with code 127 (command not found)"
	case code > 128 && code < 160:
		// Shells and bwrap report death by signal N as 128+N.
		return fmt.Sprintf("the script exited with code %d (usually: killed by signal %d)", code, code-128)
	default:
		return fmt.Sprintf("the script exited with code %d", code)
	}
}
