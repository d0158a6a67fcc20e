package runtimes

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ArgumentError means the payload does not fit main's signature, e.g. a
// required parameter is missing. Retrying with the same payload cannot help.
type ArgumentError struct {
	Message string // e.g. `missing required argument "name" for main(name, greeting="Hello")`
}

func (e *ArgumentError) Error() string { return e.Message }

// DefinitionError means the script cannot be called at all: it defines no
// main, main is not callable, or the script does not parse. Never retried.
type DefinitionError struct {
	Message string
}

func (e *DefinitionError) Error() string { return e.Message }

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

// IsTerminal reports whether err is one that a retry cannot fix: an
// ArgumentError, DefinitionError or ResultError anywhere in its chain.
func IsTerminal(err error) bool {
	var (
		a *ArgumentError
		d *DefinitionError
		r *ResultError
	)
	return errors.As(err, &a) || errors.As(err, &d) || errors.As(err, &r)
}

// shimError is the content of error.json.
type shimError struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// Outcome reads what a finished run produced. hostIODir is the IO dir as the
// host sees it; lastLine is the last non-empty stdout line (used by Bash and
// Exec); exitCode is the process's exit code (-1 if killed by a signal).
//
// On success it returns the result as valid JSON (`null` when main returned
// nothing, or a bash script printed nothing). Failures are *ArgumentError,
// *DefinitionError, *ResultError (terminal, see IsTerminal) or *ScriptError.
func Outcome(kind Kind, hostIODir string, lastLine []byte, exitCode int) (json.RawMessage, error) {
	switch kind {
	case Python, Bun:
		return shimOutcome(hostIODir, exitCode)
	case Bash, Exec:
		return lineOutcome(lastLine, exitCode)
	default:
		return nil, fmt.Errorf("runtimes: Outcome: unknown runtime %q", kind)
	}
}

func shimOutcome(dir string, exitCode int) (json.RawMessage, error) {
	// error.json first: it says what went wrong more precisely than the
	// exit code, which a jail or a signal may have rewritten.
	data, err := os.ReadFile(filepath.Join(dir, ErrorFile))
	switch {
	case err == nil:
		return nil, shimFailure(data, exitCode)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("runtimes: Outcome: %w", err)
	}

	if exitCode != 0 {
		// The process died without the shim getting a word in: killed (by
		// the timeout, the OOM killer), the interpreter missing, or a crash.
		return nil, &ScriptError{ExitCode: exitCode, Message: exitMessage(exitCode) + " without a result"}
	}

	data, err = os.ReadFile(filepath.Join(dir, ResultFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, &ScriptError{ExitCode: exitCode, Message: "the script exited with code 0 but wrote no result"}
	case err != nil:
		return nil, fmt.Errorf("runtimes: Outcome: %w", err)
	}
	data = bytes.TrimSpace(data)
	if !json.Valid(data) {
		return nil, &ResultError{Message: ResultFile + " does not hold valid JSON"}
	}
	return json.RawMessage(data), nil
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
