package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/agenthost/host/internal/jobtype"
)

// maxPayloadFile bounds what `invoke` reads from a file or stdin: NATS would refuse a larger
// message anyway (its default max_payload is 1 MB; servers may raise it to 64 MB).
const maxPayloadFile = 64 << 20

// readPayload resolves invoke's payload argument: "-" reads stdin, "@file" reads the file,
// anything else is the JSON itself. It refuses what the host would refuse, naming where the
// payload came from, before anything is published.
func readPayload(arg string, stdin io.Reader) ([]byte, error) {
	var (
		body []byte
		src  string
		err  error
	)
	switch {
	case arg == "-":
		src = "stdin"
		if f, ok := stdin.(*os.File); ok && isTerminal(f) {
			fmt.Fprintln(os.Stderr, "reading the payload from the terminal; end it with ctrl-d")
		}
		body, err = io.ReadAll(io.LimitReader(stdin, maxPayloadFile+1))
	case strings.HasPrefix(arg, "@"):
		src = arg[1:]
		var f *os.File
		if f, err = os.Open(src); err == nil {
			body, err = io.ReadAll(io.LimitReader(f, maxPayloadFile+1))
			f.Close()
		}
	default:
		src, body = "the argument", []byte(arg)
	}
	if err != nil {
		return nil, fmt.Errorf("read the payload from %s: %w", src, err)
	}
	if len(body) > maxPayloadFile {
		return nil, fmt.Errorf("payload from %s is over %d MB, more than any NATS server takes; put large data in a volume or object store and pass its name", src, maxPayloadFile>>20)
	}
	raw, _, err := jobtype.DecodePayload(body)
	if err != nil {
		return nil, fmt.Errorf("payload from %s: %w", src, err)
	}
	return raw, nil
}
