package client

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
)

// ErrPayloadTooLarge is returned for a payload over what the NATS server takes in one message.
var ErrPayloadTooLarge = errors.New("payload over the NATS server's max_payload")

// headerRoom is what a trigger's headers (its id, caller, the host-signed start) may take of a
// message, left out of the room for its payload.
const headerRoom = 4 << 10

// CheckPayload refuses a payload of function that the NATS server would refuse as one message,
// before anything is written for it: publishing it would fail with nats' bare "maximum payload
// exceeded", naming neither the limit nor the way around it, and leave its queued record
// behind. The limit is the server's max_payload (1 MiB by default), as the connection learned it.
func CheckPayload(nc *nats.Conn, function string, payload []byte) error {
	limit := nc.MaxPayload()
	if limit <= 0 || int64(len(payload)) <= limit-headerRoom {
		return nil
	}
	return fmt.Errorf("payload for %s is %s, over the %s this NATS server takes in one message (its max_payload, less %d KiB for the trigger's headers): %w; "+
		"put large data in a volume (a function's volume: annotation; `host volumes`) or an object store and pass its name, "+
		"or raise max_payload in the NATS server's configuration (the embedded server's: `host serve --nats-config nats.conf`, whose max_payload line says 1MB)",
		function, sizeText(int64(len(payload))), sizeText(limit-headerRoom), headerRoom>>10, ErrPayloadTooLarge)
}

// sizeText is n bytes as a person reads it, the exact count after: "2.0 MiB (2097152 bytes)".
func sizeText(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB (%d bytes)", float64(n)/(1<<20), n)
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB (%d bytes)", float64(n)/(1<<10), n)
	}
	return fmt.Sprintf("%d bytes", n)
}
