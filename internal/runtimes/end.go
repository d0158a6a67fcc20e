package runtimes

import (
	"bytes"
	"strconv"
)

// EndMarker starts the line a shim (and warm.sh) prints on stdout and on stderr once the job's
// own work is over: main has returned, the result or error file is written, the streams are
// flushed. The line is EndMarker followed by the exit code the runtime is about to exit with.
// Seen on both streams, it tells the host that everything the job printed has been read and
// that it may answer without waiting for the runtime's exit and the jail's teardown. The
// record separator byte keeps a job's ordinary output from matching it by accident; a job that
// prints it on purpose only ends its own run early.
const EndMarker = "\x1ehost-end "

// ReadyMarker is the line a warm jail's runtime prints on stdout once it is loaded (the shim and,
// with an import ahead, the script's top-level code) and is about to block reading its
// hand-over: from then on a job handed to it waits for nothing but the runtime itself. It is
// the host's, not the job's: the runner drops it from the job's output (see ParseReady).
const ReadyMarker = "\x1ehost-ready"

// ParseReady reports whether line (without its newline) ends in the ready line, and what came
// before it on the line: top-level output printed without a newline of its own.
func ParseReady(line []byte) (before []byte, ok bool) {
	return bytes.CutSuffix(line, []byte(ReadyMarker))
}

// ParseEnd reports whether line (without its newline) ends in an end line, the exit code it
// announces, and what came before it on the line: the job's last output when that had no
// newline of its own.
func ParseEnd(line []byte) (before []byte, code int, ok bool) {
	i := bytes.LastIndex(line, []byte(EndMarker))
	if i < 0 {
		return line, 0, false
	}
	code, err := strconv.Atoi(string(line[i+len(EndMarker):]))
	if err != nil || code < 0 || code > 255 {
		return line, 0, false
	}
	return line[:i], code, true
}
