package system_test

import (
	"strings"
	"testing"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// TestArgumentTypesCheckedBeforeTheJail: a payload whose values do not fit main's type hints
// fails with the argument, the expected and the given type, at once and for good (retries:
// 2 notwithstanding), and no process is started for it: its record has no exit code, where
// a run that started has one.
func TestArgumentTypesCheckedBeforeTheJail(t *testing.T) {
	h := hosttest.New(t, map[string]string{
		"top.py":   "# sandbox\n# retries: 2\ndef main(text: str, top: int = 3):\n    return text.split()[:top]\n",
		"count.ts": "// sandbox\n// retries: 2\nexport function main(text: string, top: number = 3) {\n  return text.split(\" \").slice(0, top);\n}\n",
	})
	cases := []struct {
		fn, payload, wantErr, wantResult string
	}{
		{"top", `{"text":"a b c d","top":"two"}`, `argument "top": expected int, got string "two"`, ""},
		{"top", `{"text":"a b c d","top":2.5}`, `argument "top": expected int, got number 2.5`, ""},
		{"top", `{"text":"a b c d","top":2}`, "", `["a","b"]`},
		{"count", `{"text":["a"],"top":2}`, `argument "text": expected string, got array`, ""},
		{"count", `{"text":"a b c","top":2}`, "", `["a","b"]`},
	}
	for _, c := range cases {
		t.Run(c.fn+" "+c.payload, func(t *testing.T) {
			reply := h.Call(c.fn, c.payload)
			rec := h.Record(reply.Header.Get(bus.HeaderJobID))
			if c.wantErr == "" {
				if string(reply.Data) != c.wantResult || rec.Status != jobtype.Succeeded || rec.ExitCode == nil {
					t.Fatalf("reply %s %s, record %+v; want %s from a run", reply.Header, reply.Data, rec, c.wantResult)
				}
				return
			}
			ev := hosttest.Decode[jobs.ErrorEvent](t, reply.Data)
			if reply.Header.Get(bus.HeaderJobStatus) != "failed" || !strings.Contains(ev.Error, c.wantErr) {
				t.Fatalf("reply %s %s; want it failed with %q", reply.Header, reply.Data, c.wantErr)
			}
			if rec.Status != jobtype.Failed || rec.Attempts != 1 || !strings.Contains(rec.Error, c.wantErr) {
				t.Fatalf("record %+v; want failed after one attempt with %q", rec, c.wantErr)
			}
			if rec.ExitCode != nil {
				t.Fatalf("record has exit code %d: a process ran for a payload of the wrong type", *rec.ExitCode)
			}
		})
	}
}
