package jobtype

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// DecodePayload turns a message body into the arguments object: an empty body is no arguments,
// anything else must be a JSON object. A body that is not one is a terminal error saying what
// to send instead. The runner decodes every job's payload with it, and the faces (web,
// dashboard, MCP, the CLI) check theirs with it before they send, so that they all refuse the
// same bodies with the same words.
func DecodePayload(body []byte) (raw []byte, args map[string]any, err error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return []byte("{}"), map[string]any{}, nil
	}
	if err := json.Unmarshal(body, &args); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) || !json.Valid(body) {
			return nil, nil, terminalf("payload is not valid JSON (%v); send a JSON object such as {\"name\":\"Ada\"}, or nothing", err)
		}
		return nil, nil, terminalf("payload must be a JSON object of arguments, got %s; wrap it, e.g. {\"value\": %s}", jsonKind(body), abbreviate(body, 40))
	}
	if args == nil { // the body was `null`
		return nil, nil, terminalf("payload must be a JSON object of arguments, got null")
	}
	return body, args, nil
}

func terminalf(format string, args ...any) error {
	return Terminal(fmt.Errorf(format, args...))
}

func jsonKind(b []byte) string {
	switch b[0] {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

func abbreviate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}
