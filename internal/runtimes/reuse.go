package runtimes

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// bashReuse is the loop a reused bash jail runs its messages in (reuse.sh).
const bashReuse = "reuse.sh"

// Reused jails (`reuse: <n>`).
//
// A reused jail's runtime serves many messages, one after another: it reads one frame per
// message on stdin (ReuseFrame), runs it, cleans up after it and prints the end line
// (EndMarker) on both streams, then reads the next frame. Before the end line it has killed
// every process the message left and emptied /tmp and /dev/shm; the host empties /job and the
// io directory after it. A message that fails (a non-zero end), exits the runtime (sys.exit,
// process.exit) or leaves something it cannot clean ends the runtime after its end line: the
// host then replaces the jail. Otherwise the ready line (ReadyMarker) follows the end line on
// stdout: the jail is clean, and the host may give it its next message. EOF on stdin ends the
// runtime, with nothing run.

// BuildReuse returns how to start a reused jail's runtime (see the package comment above).
// importAhead lets Python and Bun import the script before the first message (as BuildWarm).
func BuildReuse(kind Kind, p Paths, importAhead bool) (*Command, error) {
	if kind == Bash && p.ShimDir != "" {
		return &Command{Argv: []string{"bash", filepath.Join(p.ShimDir, bashReuse), p.Script}}, nil
	}
	if kind != Python && kind != Bun {
		return nil, fmt.Errorf("runtimes: BuildReuse: %s scripts cannot be run in a reused jail", kind)
	}
	// A warm jail's command, in the shim's reuse mode: --warm becomes --reuse.
	cmd, err := BuildWarm(kind, p, importAhead)
	if err != nil {
		return nil, err
	}
	last := len(cmd.Argv) - 1
	cmd.Argv[last] = "--reuse" + strings.TrimPrefix(cmd.Argv[last], "--warm")
	return cmd, nil
}

// ReuseFrame is one message for a reused jail of kind: its arguments (payload, the raw JSON
// object) and the environment the message adds to the jail's (as Handover's env). Python and
// Bun read one line of JSON, {"args": ..., "env": {...}}; bash reads the export lines and an
// empty line (as Handover's), then the payload's length in bytes on a line, then the payload.
func ReuseFrame(kind Kind, payload []byte, env []string) ([]byte, error) {
	switch kind {
	case Python, Bun:
		b, err := Handover(kind, payload, env)
		if err != nil {
			return nil, err
		}
		return append(b, '\n'), nil // json.Marshal writes no raw newline: the frame is one line
	case Bash:
		b, err := Handover(kind, nil, env)
		if err != nil {
			return nil, err
		}
		b = b[:len(b)-len("{}")] // the export lines and the empty line: the payload follows, counted
		if len(bytes.TrimSpace(payload)) == 0 {
			payload = []byte("{}")
		}
		b = append(b, strconv.Itoa(len(payload))+"\n"...)
		return append(b, payload...), nil
	}
	return nil, fmt.Errorf("runtimes: ReuseFrame: %s scripts cannot be run in a reused jail", kind)
}
