package jobs

import "testing"

// The state machine of one delivery: queued → running → succeeded | failed | retrying |
// canceled, and queued → failed | retrying for a job refused before it ran.
func TestStatusTo(t *testing.T) {
	for _, c := range []struct {
		from, to Status
		ok       bool
	}{
		{Queued, Running, true},
		{Queued, Failed, true},
		{Queued, Retrying, true},
		{Queued, Succeeded, false},
		{Running, Succeeded, true},
		{Running, Failed, true},
		{Running, Retrying, true},
		{Running, Canceled, true},
		{Running, Queued, false},
		{Succeeded, Running, false},
		{Failed, Retrying, false},
		{Canceled, Running, false},
		{Retrying, Running, false}, // a redelivery starts queued again
	} {
		if err := c.from.To(c.to); (err == nil) != c.ok {
			t.Errorf("%s → %s: err %v, want allowed %v", c.from, c.to, err, c.ok)
		}
	}
}

func TestStatusFinal(t *testing.T) {
	for s, final := range map[Status]bool{Queued: false, Running: false, Retrying: false, Succeeded: true, Failed: true, Canceled: true} {
		if s.Final() != final {
			t.Errorf("%s.Final() = %v", s, !final)
		}
	}
}
