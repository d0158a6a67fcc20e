package system_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/runtimes"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// TestBigArgumentLeavesBashScriptsWorking: each top-level scalar became ARG_<KEY>, so a 200 KB
// string made every external command of a bash function fail with "Argument list too long"
// (/usr/bin/sleep: Argument list too long), and a script that did not check each command
// "succeeded" having done nothing. ARG_ variables are set only up to runtimes.MaxArgEnv; a
// larger value is on stdin only, and the job's log says which variable was left out and why.
// Both ways a job starts: in a jail of its own, and handed to a warm jail.
func TestBigArgumentLeavesBashScriptsWorking(t *testing.T) {
	script := `# sandbox
# warm: %d
ran=no
/usr/bin/env true && ran=yes
stdin=$(wc -c)
printf '{"ran":"%%s","small":"%%s","big_env":%%d,"stdin_bytes":%%d}\n' "$ran" "$ARG_SMALL" "${#ARG_BIG}" "$stdin"
`
	h := hosttest.New(t, map[string]string{
		"cold.sh": fmt.Sprintf(script, 0),
		"warm.sh": fmt.Sprintf(script, 1),
	})
	big := strings.Repeat("b", 200_000)
	payload := fmt.Sprintf(`{"big":%q,"small":"hi"}`, big)
	for _, fn := range []string{"cold", "warm"} {
		t.Run(fn, func(t *testing.T) {
			logs := h.Sub(bus.LogsPrefix + fn + ".*")
			var data []byte
			if fn == "warm" {
				data = callWarm(t, h, fn, payload)
			} else {
				data = h.Call(fn, payload).Data
			}
			var got struct {
				Ran        string `json:"ran"`
				Small      string `json:"small"`
				BigEnv     int    `json:"big_env"`
				StdinBytes int    `json:"stdin_bytes"`
			}
			if err := json.Unmarshal(data, &got); err != nil {
				t.Fatalf("reply %s: %v", data, err)
			}
			if got.Ran != "yes" || got.Small != "hi" || got.BigEnv != 0 || got.StdinBytes != len(payload) {
				t.Fatalf("the script saw %+v; want its command run, ARG_SMALL set, ARG_BIG unset and the whole payload (%d bytes) on stdin", got, len(payload))
			}
			want := fmt.Sprintf("[host] ARG_BIG is not set: its value is %d bytes, over the %d-byte bound for one ARG_ variable", len(big), runtimes.MaxArgEnv)
			for {
				line := string(h.Next(logs).Data)
				if strings.HasPrefix(line, want) {
					if !strings.Contains(line, `read "big" from the JSON on stdin`) {
						t.Errorf("the log line does not say where the value is: %q", line)
					}
					break
				}
			}
		})
	}
}
