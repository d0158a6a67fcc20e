package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/host/internal/testkit/natstest"
)

// The floor must do what it claims to, or the ratios against it mean nothing: every call
// stored, recorded once, answered, and acked (nothing left in the stream).
func TestDurableCallStoresRecordsAnswersAndAcks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, js := natstest.Start(t)
	d, err := startDurableCall(ctx, nc.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	const calls = 20
	for range calls {
		if err := d.call(ctx); err != nil {
			t.Fatal(err)
		}
	}
	kv, err := js.KeyValue(ctx, floorBucket)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range keys.Keys() {
		n++
	}
	if n != calls {
		t.Errorf("%d calls wrote %d key-value entries, want one each", calls, n)
	}
	stream, err := js.Stream(ctx, floorStream)
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, "every call acked", func() bool {
		info, err := stream.Info(ctx)
		return err == nil && info.State.Msgs == 0
	})
	cons, err := stream.Consumer(ctx, "worker")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := cons.Info(ctx); err != nil || info.NumAckPending != 0 || info.Delivered.Stream != calls {
		t.Errorf("consumer after %d calls: %+v, %v; want all %d delivered and none pending", calls, info, err, calls)
	}
}

// A call nobody answers (the worker stopped) ends with an error that says which step waited.
func TestDurableCallUnansweredSaysSo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, _ := natstest.Start(t)
	d, err := startDurableCall(ctx, nc.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	d.stop()
	<-d.done
	defer d.close()
	short, stop := context.WithTimeout(ctx, 500*time.Millisecond)
	defer stop()
	err = d.call(short)
	if err == nil || !strings.Contains(err.Error(), "wait for the answer") {
		t.Fatalf("an unanswered call returned %v, want an error about waiting for the answer", err)
	}
}
