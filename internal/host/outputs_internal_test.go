package host

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestRefusedByNATS: what NATS refuses for good fails the job; what it will take when asked
// again (a duplicate still being stored, found by the partition tests) is retried.
func TestRefusedByNATS(t *testing.T) {
	cases := map[string]struct {
		err  error
		want bool
	}{
		"max payload":          {fmt.Errorf("publish: %w", nats.ErrMaxPayload), true},
		"bad subject":          {nats.ErrBadSubject, true},
		"stream refuses":       {&jetstream.APIError{Code: 400, ErrorCode: 10077, Description: "maximum bytes exceeded"}, true},
		"duplicate in process": {fmt.Errorf("publish: %w", &jetstream.APIError{Code: 409, ErrorCode: 10158, Description: "duplicate message id is in process"}), false},
		"server error":         {&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, false},
		"timeout":              {nats.ErrTimeout, false},
	}
	for name, tc := range cases {
		if got := refusedByNATS(tc.err); got != tc.want {
			t.Errorf("%s: refusedByNATS = %v, want %v", name, got, tc.want)
		}
	}
}
