package system_test

import (
	"strings"
	"testing"

	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// A TS function's npm imports are installed by the host, once, and the first run says so.
// num has no warm jail: a warm jail's start installs ahead of any job, and whether the first
// job then waits for that install (and says so) or finds it done is a race.
func TestPackagesInstalledOnFirstRun(t *testing.T) {
	h := hosttest.New(t, map[string]string{
		"num.ts": `// sandbox
// warm: 0
import isNumber from "is-number";

export function main(value: string) {
  return { value, isNumber: isNumber(value) };
}
`,
		"ghost.ts": `// sandbox
import thing from "this-package-does-not-exist-zz9";
export function main() { return thing; }
`,
	})
	logs := h.Sub("agent.logs.num.*")
	reply := h.Call("num", `{"value":"42"}`)
	if string(reply.Data) != `{"value":"42","isNumber":true}` {
		t.Fatalf("num: %s", reply.Data)
	}
	if line := string(h.Next(logs).Data); !strings.Contains(line, "[host]") || !strings.Contains(line, "is-number") {
		t.Fatalf("first log line does not announce the install: %q", line)
	}
	if got := string(h.Call("num", `{"value":"x"}`).Data); got != `{"value":"x","isNumber":false}` {
		t.Fatalf("second run: %s", got)
	}
	ev := hosttest.Decode[jobs.ErrorEvent](t, h.Call("ghost", `{}`).Data)
	if !strings.Contains(ev.Error, "this-package-does-not-exist-zz9") || !strings.Contains(ev.Error, "install packages") {
		t.Fatalf("missing package error: %q", ev.Error)
	}
}
