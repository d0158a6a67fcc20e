package natstest

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

func TestStart(t *testing.T) {
	nc, js := Start(t)
	if !nc.IsConnected() {
		t.Fatalf("not connected: %v", nc.Status())
	}
	ctx := t.Context()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "b"})
	if err != nil {
		t.Fatalf("JetStream is not there: %v", err)
	}
	if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(context.Background(), "k"); err != nil || string(e.Value()) != "v" {
		t.Fatalf("read back %v %v", e, err)
	}
}

func TestPoll(t *testing.T) {
	var n atomic.Int32
	if !Poll(EventuallyWithin, func() bool { return n.Add(1) == 3 }) {
		t.Fatal("a condition that comes true was given up on")
	}
	if got := n.Load(); got != 3 {
		t.Fatalf("looked %d times, want 3: it must stop as soon as the condition holds", got)
	}
	if Poll(0, func() bool { return false }) {
		t.Fatal("a condition that never holds was reported held")
	}
}
