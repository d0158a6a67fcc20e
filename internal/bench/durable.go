package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// durableCall is the floor for a durable call, which is what a user would write with nats.go
// and compare a call of the host's with: the caller stores its request in a stream, a worker
// fetches it, writes one key-value entry, replies to the caller's inbox and acks. It runs on
// the server it is given, with that server's settings (the bench hosts': every write synced),
// and nothing of the host's: no job record moves, no result stream, no jail.
type durableCall struct {
	caller, worker *nats.Conn
	js             jetstream.JetStream
	stop           context.CancelFunc
	done           chan struct{}
}

const (
	floorStream  = "BENCH_FLOOR"
	floorSubject = "bench.floor.run"
	floorBucket  = "bench_floor"
	floorReplyTo = "Bench-Reply-To"
)

// startDurableCall sets up the stream, consumer and bucket on url's server and starts the worker.
func startDurableCall(ctx context.Context, url string) (*durableCall, error) {
	d := &durableCall{done: make(chan struct{})}
	var err error
	if d.caller, err = nats.Connect(url, nats.Name("bench-floor-caller")); err != nil {
		return nil, fmt.Errorf("durable floor: connect the caller to %s: %w", url, err)
	}
	if d.worker, err = nats.Connect(url, nats.Name("bench-floor-worker")); err != nil {
		d.caller.Close()
		return nil, fmt.Errorf("durable floor: connect the worker to %s: %w", url, err)
	}
	fail := func(what string, err error) (*durableCall, error) {
		d.caller.Close()
		d.worker.Close()
		return nil, fmt.Errorf("durable floor: %s: %w", what, err)
	}
	if d.js, err = jetstream.New(d.caller); err != nil {
		return fail("JetStream", err)
	}
	wjs, err := jetstream.New(d.worker)
	if err != nil {
		return fail("JetStream", err)
	}
	stream, err := d.js.CreateStream(ctx, jetstream.StreamConfig{Name: floorStream, Subjects: []string{floorSubject},
		Storage: jetstream.FileStorage, Retention: jetstream.WorkQueuePolicy})
	if err != nil {
		return fail("stream", err)
	}
	if _, err := stream.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "worker", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		return fail("consumer", err)
	}
	kv, err := wjs.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: floorBucket, Storage: jetstream.FileStorage})
	if err != nil {
		return fail("bucket", err)
	}
	cons, err := wjs.Consumer(ctx, floorStream, "worker")
	if err != nil {
		return fail("consumer", err)
	}
	wctx, stop := context.WithCancel(context.Background())
	d.stop = stop
	go func() {
		defer close(d.done)
		for wctx.Err() == nil {
			// One message at a time, as a host's run slot takes them.
			batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
			if err != nil {
				// The caller's wait for its answer says what went wrong; this only keeps an
				// error from spinning.
				select {
				case <-wctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
				continue
			}
			for msg := range batch.Messages() {
				meta, _ := msg.Metadata()
				key := fmt.Sprintf("job.%d", meta.Sequence.Stream)
				if _, err := kv.Put(wctx, key, []byte(`{"status":"succeeded"}`)); err != nil {
					msg.Nak()
					continue
				}
				d.worker.Publish(msg.Headers().Get(floorReplyTo), []byte(`null`))
				msg.Ack()
			}
		}
	}()
	return d, nil
}

// call is one durable call: stored (and acknowledged), then answered.
func (d *durableCall) call(ctx context.Context) error {
	inbox := d.caller.NewRespInbox()
	sub, err := d.caller.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	m := nats.NewMsg(floorSubject)
	m.Header.Set(floorReplyTo, inbox)
	m.Data = []byte("{}")
	if _, err := d.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("durable floor: store the call: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := sub.NextMsgWithContext(ctx); err != nil {
		return fmt.Errorf("durable floor: wait for the answer: %w", err)
	}
	return nil
}

// close stops the worker; the stream and bucket go with the bench's server.
func (d *durableCall) close() {
	d.stop()
	<-d.done
	d.caller.Close()
	d.worker.Close()
}
