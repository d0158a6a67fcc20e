package system_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/objstore"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/testkit/s3test"
)

const noteFn = `# sandbox
# volume: notes notes
read -r payload
echo "$payload" >> notes/log
wc -l < notes/log
`

// history reads a volume's kept versions through h's NATS, as `host volumes history` does.
func history(t *testing.T, h *hosttest.H, s3 *objstore.S3Config, name string) []objstore.VersionInfo {
	t.Helper()
	ctx := context.Background()
	js, err := jetstream.New(h.NC)
	if err != nil {
		t.Fatal(err)
	}
	var b objstore.Backend
	if s3 != nil {
		b, err = objstore.NewS3Backend(ctx, *s3)
	} else {
		b, err = objstore.NewJetStreamBackend(ctx, js, objstore.DefaultJetStreamBucket, 0)
	}
	if err != nil {
		t.Fatal(err)
	}
	v, err := objstore.New(ctx, js, b, objstore.Options{Log: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	vs, err := v.History(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

// checkRecoveredLog finds the start's line saying what it recovered.
func checkRecoveredLog(t *testing.T, h *hosttest.H, recovered int) {
	t.Helper()
	lines := h.Logs.FilterMessage("NATS held no volume heads: recovered them from the volume store").All()
	if len(lines) != 1 {
		t.Fatalf("%d recovery lines in the host's log, want 1", len(lines))
	}
	f := lines[0].ContextMap()
	if f["recovered"] != int64(recovered) || f["found"] != int64(recovered) || f["broken"] != int64(0) {
		t.Fatalf("recovery line: %v", f)
	}
}

// Jobs commit versions of a volume to S3 (a real versitygw); NATS is then lost (a fresh host
// on a fresh NATS, its data directory new, on the same bucket). The new host recovers the
// volume at its last committed version with its history, says so in its log, and the next job
// reads it.
func TestVolumesRecoveredFromS3AfterNATSIsLost(t *testing.T) {
	s3 := s3test.Start(t)
	useS3 := func(c *app.Config) { c.S3 = &s3 }
	first := hosttest.New(t, map[string]string{"note.sh": noteFn}, useS3)
	for i := 1; i <= 3; i++ {
		if got := string(first.Call("note", fmt.Sprintf(`{"n":%d}`, i)).Data); got != fmt.Sprint(i) {
			t.Fatalf("run %d: %s", i, got)
		}
	}
	before := history(t, first, &s3, "notes")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first.Host.Shutdown(ctx)

	second := hosttest.New(t, map[string]string{"note.sh": noteFn}, useS3)
	checkRecoveredLog(t, second, 1)
	after := history(t, second, &s3, "notes")
	if len(after) != 3 || after[2].Version != 3 || after[0].JobID != before[0].JobID || after[2].JobID != before[2].JobID {
		t.Fatalf("recovered history %+v, want %+v", after, before)
	}
	if got := string(second.Call("note", `{"n":4}`).Data); got != "4" {
		t.Fatalf("the next job counted %s lines, want 4: it did not read the recovered volume", got)
	}
	if got := second.ReadVolume(&s3, "notes", "log"); got != "{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n{\"n\":4}\n" {
		t.Fatalf("notes: %q", got)
	}
}

// The same with volumes in the JetStream Object Store. That store lives in NATS, so it is the
// heads bucket alone that is lost here (deleted, as a purge or a lost KeyValue bucket leaves
// it); the host restarted on the same NATS recovers the heads from the Object Store.
func TestVolumesRecoveredFromTheObjectStoreAfterTheHeadsAreLost(t *testing.T) {
	h := hosttest.New(t, map[string]string{"note.sh": noteFn})
	for i := 1; i <= 2; i++ {
		if got := string(h.Call("note", fmt.Sprintf(`{"n":%d}`, i)).Data); got != fmt.Sprint(i) {
			t.Fatalf("run %d: %s", i, got)
		}
	}
	js, err := jetstream.New(h.NC)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(context.Background(), objstore.HeadsBucket); err != nil {
		t.Fatal(err)
	}
	h.Restart(10 * time.Second)
	checkRecoveredLog(t, h, 1)
	if vs := history(t, h, nil, "notes"); len(vs) != 2 || vs[1].Version != 2 {
		t.Fatalf("recovered history: %+v", vs)
	}
	if got := string(h.Call("note", `{"n":3}`).Data); got != "3" {
		t.Fatalf("the next job counted %s lines, want 3", got)
	}
	if got := h.ReadVolume(nil, "notes", "log"); !strings.HasSuffix(got, "{\"n\":3}\n") || strings.Count(got, "\n") != 3 {
		t.Fatalf("notes: %q", got)
	}
}
