package jobs_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agenthost/host/internal/jobs"
)

// A record keeps the arguments as sent when they are JSON of a size a record can carry, and
// their hash and size whatever they are.
func TestKeepArgs(t *testing.T) {
	big := `{"s":"` + strings.Repeat("x", jobs.MaxArgsBytes) + `"}`
	tests := []struct {
		name, payload string
		kept          bool
	}{
		{"an object", `{"n": 1, "token": "$secret:api"}`, true},
		{"a list", `[1,2]`, true},
		{"empty", ``, false},
		{"not JSON", `hello`, false},
		{"over the limit", big, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r jobs.Record
			r.KeepArgs([]byte(tt.payload))
			if got := r.Args != nil; got != tt.kept {
				t.Fatalf("kept %t, want %t", got, tt.kept)
			}
			if tt.kept && string(r.Args) != tt.payload {
				t.Fatalf("kept %s, want it as sent: %s", r.Args, tt.payload)
			}
			if r.ArgsBytes != len(tt.payload) || r.ArgsSHA256 != jobs.ArgsHash([]byte(tt.payload)) {
				t.Fatalf("size %d, hash %s: want %d and the payload's hash", r.ArgsBytes, r.ArgsSHA256, len(tt.payload))
			}
			// Whatever it keeps, the record still encodes: a record that cannot be written
			// would leave the job without one.
			if _, err := json.Marshal(&r); err != nil {
				t.Fatal(err)
			}
		})
	}
}
