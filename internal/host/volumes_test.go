package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/host"
	"github.com/agenthost/host/internal/objstore"
	"github.com/agenthost/host/internal/objstore/s3test"
)

// readVolume reads one file of a volume's latest version, as `host volumes get` does.
func (h *harness) readVolume(s3 *objstore.S3Config, name, path string) string {
	h.t.Helper()
	ctx := context.Background()
	js, _ := jetstream.New(h.nc)
	var b objstore.Backend
	var err error
	if s3 != nil {
		b, err = objstore.NewS3Backend(ctx, *s3)
	} else {
		b, err = objstore.NewJetStreamBackend(ctx, js, objstore.DefaultJetStreamBucket, 0)
	}
	if err != nil {
		h.t.Fatal(err)
	}
	v, err := objstore.New(ctx, js, b, objstore.Options{Log: zap.NewNop()})
	if err != nil {
		h.t.Fatal(err)
	}
	var out bytes.Buffer
	if err := v.Get(ctx, name, 0, path, &out); err != nil {
		h.t.Fatalf("volume %s %s: %v", name, path, err)
	}
	return out.String()
}

// The seed's custom Python agent, as written: its memory grows across runs.
func TestPythonAgentRemembers(t *testing.T) {
	src, err := os.ReadFile("../../functions/agent.py")
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, map[string]string{"agent.py": string(src)})
	for i, prompt := range []string{"first question", "second question"} {
		reply := h.call("agent", fmt.Sprintf(`{"prompt":%q}`, prompt))
		if want := fmt.Sprintf(`{"role":"user","content":%q}`, prompt); string(reply.Data) != want {
			t.Fatalf("run %d: %s", i, reply.Data)
		}
	}
	var history []map[string]string
	if err := json.Unmarshal([]byte(h.readVolume(nil, "agent-memory", "history.json")), &history); err != nil {
		t.Fatal(err)
	}
	if len(history) != 2 || history[0]["content"] != "first question" || history[1]["content"] != "second question" {
		t.Fatalf("history = %v", history)
	}
}

// Ten concurrent runs each add one to a counter in a shared volume: leases serialise them, so
// the count ends at exactly ten.
func TestConcurrentRunsShareAVolumeSafely(t *testing.T) {
	h := newHarness(t, map[string]string{"count.sh": `# sandbox
# volume: counter-$workspace state
# concurrency: 10
n=$(cat state/n 2>/dev/null || echo 0)
echo $((n + 1)) > state/n
echo $((n + 1))
`})
	done := make(chan string, 10)
	for range 10 {
		go func() {
			r, err := h.nc.Request(bus.CallSubject("count"), nil, 2*time.Minute)
			if err != nil {
				done <- err.Error()
				return
			}
			done <- r.Header.Get("Job-Status")
		}()
	}
	for range 10 {
		if st := <-done; st != "succeeded" {
			t.Fatalf("a run: %s", st)
		}
	}
	if got := strings.TrimSpace(h.readVolume(nil, "counter-default", "n")); got != "10" {
		t.Fatalf("counter = %q, want 10", got)
	}
}

func TestVolumeNamesAreCheckedBeforeStorage(t *testing.T) {
	h := newHarness(t, map[string]string{"per.py": `# sandbox
# volume: user-$args[id] data
def main(id):
    open("data/x", "w").write("x")
    return id
`})
	for _, id := range []string{`"../../etc"`, `"a/b"`, `""`, fmt.Sprintf("%q", strings.Repeat("a", 300)), `null`} {
		ev := decode[host.ErrorEvent](t, h.call("per", `{"id":`+id+`}`).Data)
		if !strings.Contains(ev.Error, "volume") || ev.Attempts != 1 {
			t.Errorf("id %s: %+v", id, ev)
		}
	}
	if got := string(h.call("per", `{"id":"ada"}`).Data); got != `"ada"` {
		t.Fatalf("a safe id: %s", got)
	}
	if got := h.readVolume(nil, "user-ada", "x"); got != "x" {
		t.Fatalf("volume user-ada: %q", got)
	}
}

func TestFailedRunCommitsNothing(t *testing.T) {
	h := newHarness(t, map[string]string{"half.sh": `# sandbox
# volume: ledger ledger
read -r payload
echo "$payload" >> ledger/entries
case "$payload" in *fail*) exit 1;; esac
echo ok
`})
	if st := h.call("half", `{"entry":"one"}`).Header.Get("Job-Status"); st != "succeeded" {
		t.Fatal(st)
	}
	if st := h.call("half", `{"entry":"fail"}`).Header.Get("Job-Status"); st != "failed" {
		t.Fatal(st)
	}
	if got := h.readVolume(nil, "ledger", "entries"); got != "{\"entry\":\"one\"}\n" {
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
	h := newHarness(t, files, func(c *host.Config) { c.S3 = &s3 })
	if got := string(h.call("note", `{"n":1}`).Data); got != "1" {
		t.Fatalf("first host: %s", got)
	}
	second := h.addHost(t, func(c *host.Config) { c.S3 = &s3 })
	_ = second
	// Stop the first host so the second one must take the next call.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h.host.Shutdown(ctx)
	m := nats.NewMsg(bus.CallSubject("note"))
	m.Data = []byte(`{"n":2}`)
	reply, err := h.nc.RequestMsg(m, time.Minute)
	if err != nil || string(reply.Data) != "2" {
		t.Fatalf("second host: %v %s", err, replyData(reply))
	}
	if got := h.readVolume(&s3, "notes", "log"); got != "{\"n\":1}\n{\"n\":2}\n" {
		t.Fatalf("notes: %q", got)
	}
}

func replyData(m *nats.Msg) string {
	if m == nil {
		return ""
	}
	return string(m.Data)
}
