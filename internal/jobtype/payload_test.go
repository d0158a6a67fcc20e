package jobtype

import (
	"strings"
	"testing"
)

func TestDecodePayload(t *testing.T) {
	cases := []struct {
		in, wantErr string
	}{
		{"", ""}, {"  ", ""}, {`{"a":1}`, ""}, {`{}`, ""},
		{`{"a":`, "not valid JSON"}, {`[1]`, "an array"}, {`"s"`, "a string"}, {`3`, "a number"},
		{`true`, "a boolean"}, {`null`, "null"}, {"\xff", "not valid JSON"},
	}
	for _, c := range cases {
		_, _, err := DecodePayload([]byte(c.in))
		if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr) || !IsTerminal(err)) {
			t.Errorf("DecodePayload(%q) = %v, want %q", c.in, err, c.wantErr)
		}
	}
}
