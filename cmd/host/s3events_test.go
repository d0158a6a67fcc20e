package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/s3events"
	"github.com/agenthost/host/internal/testkit/s3test"
)

// TestS3BucketNotifications runs examples/flows/s3-uploads as its README says: versitygw
// publishes its bucket notifications to s3.events as a login that may do only that, an object
// put with curl --aws-sigv4 starts ingest once with {bucket, key, size, etag, event}, and so
// does its removal. An event no function listens on, and one that is not JSON, are dropped with
// a log line; the same event sent twice (a server's retry) runs once; an object whose run is
// under way when the host crashes runs once after the restart.
func TestS3BucketNotifications(t *testing.T) {
	v := newEventEnv(t, "../../examples/flows/s3-uploads", "s3:slow")
	token := v.addLogin(t, "s3srv", s3events.DefaultSubject)
	s3 := s3test.StartWith(t, "--event-nats-url", "nats://s3srv:"+token+"@"+v.natsAddr, "--event-nats-topic", s3events.DefaultSubject)
	put := func(method, path, body string) {
		t.Helper()
		args := []string{"-s", "-o", "/dev/null", "-w", "%{http_code}", "--aws-sigv4", "aws:amz:us-east-1:s3",
			"--user", s3test.AccessKey + ":" + s3test.SecretKey, "-H", "x-amz-content-sha256:UNSIGNED-PAYLOAD", "-X", method}
		if body != "" {
			args = append(args, "--data-binary", body)
		}
		out, err := exec.Command("curl", append(args, "http://"+s3.Endpoint+path)...).CombinedOutput()
		if err != nil || (string(out) != "200" && string(out) != "204") {
			t.Fatalf("curl -X %s %s: %v %s", method, path, err, out)
		}
	}
	put("PUT", "/uploads", "")
	sent := time.Now()
	put("PUT", "/uploads/incoming/a%20b.txt", "hello world")
	rec := v.succeeded(t, "ingest", `"key":"incoming/a b.txt"`)
	t.Logf("curl PUT to ingest's record saying succeeded: %s (seen by polling the job store)", time.Since(sent).Round(time.Millisecond))
	var args s3events.Args
	if err := json.Unmarshal(rec.Args, &args); err != nil {
		t.Fatal(err)
	}
	want := s3events.Args{Bucket: "uploads", Key: "incoming/a b.txt", Size: 11, ETag: "5eb63bbbe01eeed093cb22bb8f5acdc3", Event: "ObjectCreated:Put"}
	if args.Time == "" || (args != s3events.Args{Bucket: want.Bucket, Key: want.Key, Size: want.Size, ETag: want.ETag, Event: want.Event, Time: args.Time}) {
		t.Errorf("ingest's arguments: %+v, want %+v and a time", args, want)
	}
	if rec.StartedBy != "s3 uploads" {
		t.Errorf("started by %q, want \"s3 uploads\"", rec.StartedBy)
	}

	// An object no function listens on (outside incoming/, another bucket): dropped, logged.
	put("PUT", "/uploads/other.txt", "x")
	v.waitLog(t, "S3 event dropped: no function listens", `"key":"other.txt"`, `"listening":["gate: s3:slow/ created","ingest: s3:uploads/incoming/ created,removed"]`)

	// Not an S3 event: logged, dropped, and the router goes on.
	nc, err := nats.Connect("nats://"+v.natsAddr, nats.UserInfo("s3srv", token))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.Publish(s3events.DefaultSubject, []byte(`{"Records": [{"eventName": 42`))
	nc.Publish(s3events.DefaultSubject, []byte(`{"Records": []}`))
	// A server's retry: the same event twice.
	dup := fmt.Sprintf(`{"Records":[{"eventVersion":"2.1","eventSource":"aws:s3","eventTime":"2026-01-02T03:04:05.000Z","eventName":"ObjectCreated:Put",` +
		`"s3":{"bucket":{"name":"uploads"},"object":{"key":"incoming/dup%%2B1.csv","size":3,"eTag":"abc","sequencer":"0055AED6DCD90281E5"}}}]}`)
	nc.Publish(s3events.DefaultSubject, []byte(dup))
	nc.Publish(s3events.DefaultSubject, []byte(dup))
	nc.Flush()
	v.waitLog(t, "malformed S3 event dropped", "unexpected end of JSON input")
	v.waitLog(t, "malformed S3 event dropped", `no \"Records\"`)
	v.succeeded(t, "ingest", `"key":"incoming/dup+1.csv"`)
	v.waitLog(t, "S3 event queued", `"key":"incoming/dup+1.csv"`, `"duplicate":true`)
	// The removal comes after them all: once it ran, a second dup run would have been queued.
	put("DELETE", "/uploads/incoming/a%20b.txt", "")
	v.succeeded(t, "ingest", `"event":"ObjectRemoved:Delete"`)
	dups := v.runs(t, "ingest", func(r *jobs.Record) bool { return strings.Contains(string(r.Args), "dup+1.csv") })
	if len(dups) != 1 {
		t.Errorf("the event sent twice ran %d times, want 1", len(dups))
	}

	// An object whose run is under way when the host crashes runs once, after the restart;
	// versitygw reconnects, and a later object runs too.
	put("PUT", "/slow", "")
	put("PUT", "/slow/k1", "z")
	v.crashDuringGate(t, "k1")
	put("PUT", "/uploads/incoming/after.txt", "after")
	v.succeeded(t, "ingest", `"key":"incoming/after.txt"`)
}

// TestWiringS3Source: host wiring draws an on: s3: line as a source of its function.
func TestWiringS3Source(t *testing.T) {
	out, errOut, code := run(t, "wiring", "../../examples/flows/s3-uploads")
	if code != 0 || !strings.Contains(out, "s3:uploads/incoming/ created,removed --> ingest") {
		t.Errorf("wiring of examples/flows/s3-uploads: exit %d\n%s%s", code, out, errOut)
	}
}
