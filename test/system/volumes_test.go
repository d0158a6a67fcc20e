package system_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/testkit/s3test"
)

// The seed's custom Python agent, as written: its memory grows across runs.
func TestPythonAgentRemembers(t *testing.T) {
	src, err := os.ReadFile("../../functions/agent.py")
	if err != nil {
		t.Fatal(err)
	}
	h := hosttest.New(t, map[string]string{"agent.py": string(src)})
	for i, prompt := range []string{"first question", "second question"} {
		reply := h.Call("agent", fmt.Sprintf(`{"prompt":%q}`, prompt))
		if want := fmt.Sprintf(`{"role":"user","content":%q}`, prompt); string(reply.Data) != want {
			t.Fatalf("run %d: %s", i, reply.Data)
		}
	}
	var history []map[string]string
	if err := json.Unmarshal([]byte(h.ReadVolume(nil, "agent-memory", "history.json")), &history); err != nil {
		t.Fatal(err)
	}
	if len(history) != 2 || history[0]["content"] != "first question" || history[1]["content"] != "second question" {
		t.Fatalf("history = %v", history)
	}
}

// Ten concurrent runs each add one to a counter in a shared volume: leases serialise them, so
// the count ends at exactly ten.
func TestConcurrentRunsShareAVolumeSafely(t *testing.T) {
	h := hosttest.New(t, map[string]string{"count.sh": `# sandbox
# volume: counter-$workspace state
# concurrency: 10
n=$(cat state/n 2>/dev/null || echo 0)
echo $((n + 1)) > state/n
echo $((n + 1))
`})
	done := make(chan string, 10)
	for range 10 {
		go func() {
			r, err := h.NC.Request(bus.CallSubject("count"), nil, 2*time.Minute)
			if err != nil {
				done <- err.Error()
				return
			}
			done <- r.Header.Get(bus.HeaderJobStatus)
		}()
	}
	for range 10 {
		if st := <-done; st != "succeeded" {
			t.Fatalf("a run: %s", st)
		}
	}
	if got := strings.TrimSpace(h.ReadVolume(nil, "counter-default", "n")); got != "10" {
		t.Fatalf("counter = %q, want 10", got)
	}
}

func TestVolumeNamesAreCheckedBeforeStorage(t *testing.T) {
	h := hosttest.New(t, map[string]string{"per.py": `# sandbox
# volume: user-$args[id] data
def main(id):
    open("data/x", "w").write("x")
    return id
`})
	for _, id := range []string{`"../../etc"`, `"a/b"`, `""`, fmt.Sprintf("%q", strings.Repeat("a", 300)), `null`} {
		ev := hosttest.Decode[jobs.ErrorEvent](t, h.Call("per", `{"id":`+id+`}`).Data)
		if !strings.Contains(ev.Error, "volume") || ev.Attempts != 1 {
			t.Errorf("id %s: %+v", id, ev)
		}
	}
	if got := string(h.Call("per", `{"id":"ada"}`).Data); got != `"ada"` {
		t.Fatalf("a safe id: %s", got)
	}
	if got := h.ReadVolume(nil, "user-ada", "x"); got != "x" {
		t.Fatalf("volume user-ada: %q", got)
	}
}

func TestFailedRunCommitsNothing(t *testing.T) {
	h := hosttest.New(t, map[string]string{"half.sh": `# sandbox
# volume: ledger ledger
read -r payload
echo "$payload" >> ledger/entries
case "$payload" in *fail*) exit 1;; esac
echo ok
`})
	if st := h.Call("half", `{"entry":"one"}`).Header.Get(bus.HeaderJobStatus); st != "succeeded" {
		t.Fatal(st)
	}
	if st := h.Call("half", `{"entry":"fail"}`).Header.Get(bus.HeaderJobStatus); st != "failed" {
		t.Fatal(st)
	}
	if got := h.ReadVolume(nil, "ledger", "entries"); got != "{\"entry\":\"one\"}\n" {
		t.Fatalf("ledger after a failed run: %q", got)
	}
}

// The same agent memory on S3 (a real versitygw), across two hosts: what the first wrote, the
// second reads.
func TestVolumesOnS3AcrossHosts(t *testing.T) {
	s3 := s3test.Start(t)
	files := map[string]string{"note.sh": `# sandbox
# volume: notes notes
read -r payload
echo "$payload" >> notes/log
wc -l < notes/log
`}
	h := hosttest.New(t, files, func(c *app.Config) { c.S3 = &s3 })
	if got := string(h.Call("note", `{"n":1}`).Data); got != "1" {
		t.Fatalf("first host: %s", got)
	}
	second := h.AddHost(t, func(c *app.Config) { c.S3 = &s3 })
	_ = second
	// Stop the first host so the second one must take the next call.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h.Host.Shutdown(ctx)
	m := nats.NewMsg(bus.CallSubject("note"))
	m.Data = []byte(`{"n":2}`)
	reply, err := h.NC.RequestMsg(m, time.Minute)
	if err != nil || string(reply.Data) != "2" {
		t.Fatalf("second host: %v %s", err, replyData(reply))
	}
	if got := h.ReadVolume(&s3, "notes", "log"); got != "{\"n\":1}\n{\"n\":2}\n" {
		t.Fatalf("notes: %q", got)
	}
}

func replyData(m *nats.Msg) string {
	if m == nil {
		return ""
	}
	return string(m.Data)
}

// A job with a volume is committed only once every process of it is gone, never on its end line
// (runtimes.EndMarker), which answers jobs without volumes before their jail's teardown: what it
// writes after that line is in the committed version. The script prints the line itself, a
// second before its last write.
func TestVolumeCommitWaitsForTheWholeRun(t *testing.T) {
	h := hosttest.New(t, map[string]string{"late.sh": `# sandbox
# volume: late state
printf '\036host-end 0\n'
printf '\036host-end 0\n' >&2
sleep 1
echo "written after the end line" > state/f
`})
	for i := range 2 { // the second run is the warm jail's, the first may be either
		if reply := h.Call("late", `{}`); reply.Header.Get(bus.HeaderJobStatus) != "succeeded" {
			t.Fatalf("run %d: %v %s", i, reply.Header, reply.Data)
		}
		if got := strings.TrimSpace(h.ReadVolume(nil, "late", "f")); got != "written after the end line" {
			t.Fatalf("run %d: the volume has %q, want what the job wrote after its end line", i, got)
		}
	}
}
