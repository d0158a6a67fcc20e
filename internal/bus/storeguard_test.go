package bus_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/testkit/natstest"
)

func TestStoreRefused(t *testing.T) {
	cases := []struct {
		name      string
		err       error
		refused   bool
		queueFull bool
	}{
		{"nil", nil, false, false},
		{"a timeout says nothing of the store", context.DeadlineExceeded, false, false},
		{"no responders", nats.ErrNoResponders, false, false},
		{"a stream that is not found", jetstream.ErrStreamNotFound, false, false},
		{"insufficient resources", &jetstream.APIError{Code: 503, ErrorCode: 10023, Description: "insufficient resources"}, true, false},
		{"a full stream", fmt.Errorf("queue: %w", &jetstream.APIError{Code: 503, ErrorCode: 10077, Description: "maximum bytes exceeded"}), true, false},
		{"a full subject", &jetstream.APIError{Code: 503, ErrorCode: 10077, Description: "maximum messages per subject exceeded"}, true, true},
		{"JetStream off", &jetstream.APIError{Code: 503, ErrorCode: 10076, Description: "JetStream not enabled"}, true, false},
		{"another API error", &jetstream.APIError{Code: 400, ErrorCode: 10058, Description: "stream name already in use"}, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			reason, refused := bus.StoreRefused(c.err)
			if refused != c.refused || bus.QueueFull(c.err) != c.queueFull {
				t.Fatalf("StoreRefused(%v) = %q, %v; QueueFull %v; want %v, %v", c.err, reason, refused, bus.QueueFull(c.err), c.refused, c.queueFull)
			}
			if refused && reason == "" {
				t.Fatal("a refusal without the server's reason")
			}
		})
	}
}

// tmpfs mounts a tmpfs of size MiB, removed when the test ends; it skips, loudly, where that
// needs root the test does not have.
func tmpfs(t *testing.T, mib int) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dm", mib), "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("SKIPPED LOUDLY: cannot mount a tmpfs (needs root): %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// fillDisk writes to path until its file system is full.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for _, size := range []int{len(chunk), 512} {
		for {
			if _, err := f.Write(chunk[:size]); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(err)
				}
				break
			}
		}
	}
}

// The embedded server on a disk that fills: a write meets "no space left on device", the server
// keeps that error on the stream and stops answering its publishers, and freeing space does not
// help; EmbeddedStore sees it, refuses to restart while the disk is still full, and once space
// is freed starts JetStream again: every message stored before is there, and writes are taken.
func TestEmbeddedStoreResumesAfterAFullDisk(t *testing.T) {
	mnt := tmpfs(t, 24)
	srv := natstest.Server(t, bus.ServerConfig{StoreDir: filepath.Join(mnt, "nats")}, zap.NewNop())
	store, err := bus.NewEmbeddedStore(srv)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "heads"})
	if err != nil {
		t.Fatal(err)
	}
	publish := func(subject string, data []byte) error {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := js.Publish(pctx, subject, data)
		return err
	}
	for i := range 3 {
		if err := publish("s.before", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.Put(ctx, "vol", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if reason, refusing := store.Refusing(); refusing {
		t.Fatalf("an empty store refuses writes: %s", reason)
	}

	filler := filepath.Join(mnt, "filler")
	fillDisk(t, filler)
	// A write that needs a new block meets the full disk.
	big := make([]byte, 512<<10)
	if err := publish("s.full", big); err == nil {
		t.Fatal("a 512 KiB message was stored on a full disk")
	} else {
		t.Logf("publishing on the full disk: %v", err)
	}
	reason, refusing := store.Refusing()
	if !refusing || !strings.Contains(reason, "no space left on device") {
		t.Fatalf("on a full disk: refusing %v, reason %q; want the server's write error", refusing, reason)
	}
	if err := store.Resume(); err == nil || !strings.Contains(err.Error(), "no room yet") {
		t.Fatalf("resuming on a disk still full: %v; want it refused, saying there is no room", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// Freed, the stream still refuses: the server keeps its write error.
	if err := publish("s.freed", []byte("x")); err == nil {
		t.Log("the server took a write after space was freed without a restart (it no longer keeps its write error)")
	} else if _, refusing := store.Refusing(); !refusing {
		t.Fatalf("a write failed after space was freed (%v), yet the store is not reported refusing", err)
	}
	if err := store.Resume(); err != nil {
		t.Fatalf("resuming once space is freed: %v", err)
	}
	if reason, refusing := store.Refusing(); refusing {
		t.Fatalf("after resuming: still refusing: %s", reason)
	}
	// The client's connection survived; JetStream answers again.
	if err := publish("s.after", []byte("after")); err != nil {
		t.Fatalf("publishing after resuming: %v", err)
	}
	if _, err := kv.Put(ctx, "vol", []byte("v2")); err != nil {
		t.Fatalf("updating a KV entry after resuming: %v", err)
	}
	s, err := js.Stream(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	for subject, want := range map[string]uint64{"s.before": 3, "s.after": 1, "s.full": 0} {
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(subject))
		if err != nil {
			t.Fatal(err)
		}
		if got := info.State.Subjects[subject]; got != want {
			t.Errorf("%s: %d messages after resuming, want %d", subject, got, want)
		}
	}
	if e, err := kv.Get(ctx, "vol"); err != nil || string(e.Value()) != "v2" || e.Revision() != 2 {
		t.Errorf("KV entry after resuming: %v %v; want v2 at revision 2", e, err)
	}
	if err := store.Resume(); err != nil {
		t.Errorf("resuming a store that takes writes: %v; want nothing to do", err)
	}
}

// A server whose max_file_store is used up refuses a publish at once with its reason, which
// StoreRefused reads; the refusal is not kept: once messages go, writes are taken again.
func TestMaxFileStoreRefusesClearly(t *testing.T) {
	js := smallServer(t) // max_file_store: 64MB
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FLOOD", Subjects: []string{"flood.>"}})
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 512<<10)
	var refusal error
	for i := 0; i < 200 && refusal == nil; i++ {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, refusal = js.Publish(pctx, "flood.a", body)
		cancel()
	}
	if refusal == nil {
		t.Fatal("100 MiB stored on a server of 64 MB")
	}
	reason, ok := bus.StoreRefused(refusal)
	t.Logf("refusal: %v", refusal)
	if !ok || !strings.Contains(reason, "insufficient resources") {
		t.Fatalf("a full max_file_store: %v; want the server's refusal, insufficient resources", refusal)
	}
	if err := s.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "flood.a", body); err != nil {
		t.Fatalf("publishing after the stream was purged: %v", err)
	}
}
