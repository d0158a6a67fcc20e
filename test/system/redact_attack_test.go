package system_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/client"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/secrets"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// Issue 22, the blocker: a secret {"user":"admin","pin":48291736} and a function returning
// cred["pin"] made the redactor write {"pin":[REDACTED]}: the record's write failed, the job
// stayed running for ever, `host invoke --wait` hung, POST /run?wait gave 504, `nats req` got
// invalid JSON and the next: step received it. Every way a result leaves the host now holds
// valid JSON: the secret number replaced as a whole, the job's own numbers, booleans and nulls
// as it wrote them.
func TestAttackSecretNumberInResultStaysJSON(t *testing.T) {
	h := hosttest.New(t, map[string]string{
		"pin.py": `# sandbox
# secrets: cred
# next: agent.run.after
def main(cred: dict):
    return {"pin": cred["pin"], "user": cred["user"], "ok": True, "next": None, "near": 148291736, "n": 5432}
`,
		"after.py": "# sandbox\ndef main(pin, ok, next, near):\n    return {\"got\": pin, \"ok\": ok, \"next\": next, \"near\": near}\n",
	})
	h.SetSecret("cred", `{"user":"admin","pin":48291736}`)
	const want = `{"pin":"[REDACTED]","user":"[REDACTED]","ok":true,"next":null,"near":148291736,"n":5432}`
	after := h.Sub(bus.ResultSubject("after"))

	// nats req agent.call.pin
	reply := h.Call("pin", `{"cred":"$secret:cred"}`)
	if got := string(reply.Data); got != want || reply.Header.Get(bus.HeaderJobStatus) != "succeeded" {
		t.Fatalf("reply %s (%s), want %s", got, reply.Header.Get(bus.HeaderJobStatus), want)
	}
	rec := h.Record(reply.Header.Get(bus.HeaderJobID))
	if rec.Status != jobtype.Succeeded || string(rec.Result) != want {
		t.Fatalf("record: %s %s", rec.Status, rec.Result)
	}
	// The next: step received it as its arguments, which it could only if it was JSON.
	if got := string(h.Next(after).Data); got != `{"got":"[REDACTED]","ok":true,"next":null,"near":148291736}` {
		t.Fatalf("the next step's result: %s", got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.New(ctx, h.NC)
	if err != nil {
		t.Fatal(err)
	}
	// host invoke pin --wait
	id := ids.New()
	if err := c.Invoke(ctx, "pin", id, []byte(`{"cred":"$secret:cred"}`)); err != nil {
		t.Fatal(err)
	}
	if rec, err := c.FollowJob(ctx, "pin", id, func(client.LogLine) {}); err != nil || rec.Status != jobtype.Succeeded || string(rec.Result) != want {
		t.Fatalf("invoke --wait: %+v %v", rec, err)
	}
	// POST /run/pin?wait=60s
	web := httptest.NewServer(h.Web())
	defer web.Close()
	if code, body, _ := hosttest.Post(t, web.URL+"/run/pin?wait=60s", `{"cred":"$secret:cred"}`, nil); code != 200 || body != want {
		t.Fatalf("POST /run?wait: %d %s", code, body)
	}
}

// Issue 22: "5432 " × 200,000 is a 1 MB result that fits, until each 5432 becomes
// "[REDACTED]": the size was checked before redaction, the publish failed, and the job was
// handed back and run again, 7 attempts seen with retries: 0, each repeating its side effects.
// The size is checked after redaction, and a result too big is a terminal error naming the
// limit, on the first attempt.
func TestAttackRedactionGrowsResultPastMaxPayload(t *testing.T) {
	h := hosttest.New(t, map[string]string{
		"ports.py": `# sandbox
# env: DB=$secret:db
# retries: 0
def main():
    return "5432 " * 200000
`,
	})
	h.SetSecret("db", `{"host":"db.internal.example","port":5432}`)
	reply := h.Call("ports", `{}`)
	ev := hosttest.Decode[jobs.ErrorEvent](t, reply.Data)
	if reply.Header.Get(bus.HeaderJobStatus) != "failed" || !strings.Contains(ev.Error, "once its secrets were redacted") ||
		!strings.Contains(ev.Error, "a NATS message can carry") {
		t.Fatalf("reply: %s", reply.Data)
	}
	rec := h.Record(reply.Header.Get(bus.HeaderJobID))
	if rec.Status != jobtype.Failed || rec.Attempts != 1 {
		t.Fatalf("record: %s after %d attempts (%s)", rec.Status, rec.Attempts, rec.Error)
	}
	if n := h.Logs.FilterMessage("job failed; retrying").Len(); n > 0 {
		t.Fatalf("the job was retried %d times", n)
	}
}

// Issue 22: the 16 KiB log-line cap cut a secret before it was redacted and left 8 of its 11
// characters in the log; the 4 KiB stderr tail began with the rest of one. A match starting
// inside a \n escape broke a JSON log line, and a JSON log line with a secret number stopped
// being JSON. Every bound applies to the redacted text, and a JSON line stays JSON.
func TestAttackTruncationNeverShowsPartOfASecret(t *testing.T) {
	const tok = "apintoken-9f3a5c"
	tail := 4096 - 6 // the tail's cut falls 6 bytes into the secret
	h := hosttest.New(t, map[string]string{
		"leak.sh": fmt.Sprintf(`# sandbox
# env: TOK=$secret:tok
# env: NX=$secret:nx
# env: CRED=$secret:cred
# retries: 0
{ head -c 16380 /dev/zero | tr '\0' x; printf '%%s' "$TOK"; echo ' and the end of a long line'; } >&2
printf '{"m": "line\\nabcdefgh", "pin": 48291736}\n'
printf '%%s' "$TOK" >&2
head -c %d /dev/zero | tr '\0' y >&2
exit 3
`, tail),
	})
	h.SetSecret("tok", `"`+tok+`"`)
	h.SetSecret("nx", `"nabcdefgh"`)
	h.SetSecret("cred", `{"user":"admin","pin":48291736}`)
	logs := h.Sub("agent.logs.leak.*")
	reply := h.Call("leak", `{}`)
	ev := hosttest.Decode[jobs.ErrorEvent](t, reply.Data)
	rec := h.Record(reply.Header.Get(bus.HeaderJobID))
	recJSON, _ := json.Marshal(rec)
	shows := func(where, text string) {
		t.Helper()
		for i := 0; i+4 <= len(tok); i++ {
			if part := tok[i : i+4]; strings.Contains(text, part) {
				t.Errorf("%s shows %q of the secret: …%s", where, part, text[max(0, strings.Index(text, part)-20):min(len(text), strings.Index(text, part)+30)])
				return
			}
		}
	}
	shows("the error event", string(reply.Data))
	shows("the stderr tail", ev.StderrTail)
	shows("the record", string(recJSON))
	if len(ev.StderrTail) > 4096 {
		t.Errorf("stderr tail of %d bytes", len(ev.StderrTail))
	}
	var long, jsonLine string
	for long == "" || jsonLine == "" {
		line := string(h.Next(logs).Data)
		shows("a log line", line)
		switch {
		case strings.HasPrefix(line, "xxxx"):
			long = line
		case strings.HasPrefix(line, "{"):
			jsonLine = line
		}
	}
	if !strings.Contains(long, "bytes cut from this log line") || len(long) > 16<<10+64 {
		t.Errorf("the long line was not cut at its cap: %d bytes, ending %q", len(long), long[max(0, len(long)-60):])
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(jsonLine), &v); err != nil {
		t.Fatalf("the JSON log line is no longer JSON: %s: %v", jsonLine, err)
	}
	if v["m"] != "line\nabcdefgh" || v["pin"] != secrets.Redacted {
		t.Errorf("the JSON log line: %s", jsonLine)
	}
}
