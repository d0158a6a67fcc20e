package host

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// TestJobLog: a job's lines reach the stream in order under a tiny buffer and window, and a
// stream that takes no more lines neither hangs the job's writer nor loses lines uncounted.
func TestJobLog(t *testing.T) {
	const lines = 2000
	cases := []struct {
		name string
		// maxMsgs bounds the stream, which then refuses every further line (DiscardNew), as a
		// NATS that takes nothing would; 0 takes all.
		maxMsgs  int64
		wantSeq  uint64
		wantLost int
	}{
		{"every line stored, in order", 0, lines, 0},
		{"a stream that refuses lines", 10, 10, lines - 10},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			nc, js := natstest.Start(t)
			cfg := jetstream.StreamConfig{Name: bus.LogStream, Subjects: []string{bus.LogsPrefix + ">"}}
			if c.maxMsgs > 0 {
				cfg.MaxMsgs, cfg.Discard = c.maxMsgs, jetstream.DiscardNew
			}
			stream, err := js.CreateStream(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			pub, err := newLogPublisher(nc)
			if err != nil {
				t.Fatal(err)
			}
			l := newJobLog(pub, zap.NewNop(), "f", "job1", "flow1", logLimits{queueBytes: 64, queueLines: 4, pendingAcks: 2})
			// Returning at all is the point of the refusing case: the writer did not hang.
			for i := 1; i <= lines; i++ {
				l.Line("stdout", fmt.Appendf(nil, "line %d", i))
			}
			seq, lost := l.Close(nil)
			if seq != c.wantSeq || lost != c.wantLost {
				t.Fatalf("last sequence %d, lost %d; want %d and %d", seq, lost, c.wantSeq, c.wantLost)
			}
			for i := uint64(1); i <= seq; i++ {
				m, err := stream.GetMsg(ctx, i)
				if err != nil {
					t.Fatal(err)
				}
				if want := fmt.Sprintf("line %d", i); string(m.Data) != want || m.Header.Get(bus.HeaderJobID) != "job1" || m.Header.Get(bus.HeaderStream) != "stdout" {
					t.Fatalf("message %d: %q %v, want %q", i, m.Data, m.Header, want)
				}
			}
			l.Line("stdout", []byte("after the end"))
			if _, lost := l.Close(nil); lost != c.wantLost+1 {
				t.Fatalf("a line after Close: lost %d, want %d", lost, c.wantLost+1)
			}
		})
	}
}

// TestJobLogFinalLineIsLast: the line Close is given (a capped job's truncation notice) is the
// last one stored, even after the stream refused the job's lines for a while (as a server
// whose ingest queue overflows with other jobs' lines does): the writer then dropped lines,
// and the notice with them.
func TestJobLogFinalLineIsLast(t *testing.T) {
	ctx := context.Background()
	nc, js := natstest.Start(t)
	cfg := jetstream.StreamConfig{Name: bus.LogStream, Subjects: []string{bus.LogsPrefix + ">"}, MaxMsgs: 10, Discard: jetstream.DiscardNew}
	stream, err := js.CreateStream(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := newLogPublisher(nc)
	if err != nil {
		t.Fatal(err)
	}
	l := newJobLog(pub, zap.NewNop(), "f", "job1", "flow1", logLimits{queueBytes: 64, queueLines: 4, pendingAcks: 2})
	for i := 1; i <= 200; i++ {
		l.Line("stdout", fmt.Appendf(nil, "line %d", i))
	}
	// The stream takes lines again (the refusal was the server's, for a while).
	cfg.MaxMsgs = -1
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	seq, lost := l.Close([]byte("[host] output truncated"))
	if lost == 0 {
		t.Fatal("no line was refused: the test did not test anything")
	}
	last, err := stream.GetLastMsgForSubject(ctx, bus.LogsSubject("f", "job1"))
	if err != nil {
		t.Fatal(err)
	}
	if string(last.Data) != "[host] output truncated" || last.Sequence != seq || last.Header.Get(bus.HeaderStream) != "stderr" {
		t.Fatalf("last line %q (sequence %d, stream %s), Close said %d", last.Data, last.Sequence, last.Header.Get(bus.HeaderStream), seq)
	}
}

// ackLosing stores every line but loses the acknowledgement of the first try at the log's
// final (stderr) line, as a server too busy to answer within the wait does.
type ackLosing struct {
	jetstream.JetStream
	lost atomic.Bool
}

func (a *ackLosing) losesThis(m *nats.Msg) bool {
	return m.Header.Get(bus.HeaderStream) == "stderr" && a.lost.CompareAndSwap(false, true)
}

func (a *ackLosing) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	ack, err := a.JetStream.PublishMsg(ctx, m, opts...)
	if err == nil && a.losesThis(m) {
		return nil, context.DeadlineExceeded
	}
	return ack, err
}

func (a *ackLosing) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	if m.Header.Get(bus.HeaderStream) == "stderr" {
		ack, err := a.PublishMsg(context.Background(), m, opts...)
		return lostAck{m: m, ack: ack, err: err}, nil
	}
	return a.JetStream.PublishMsgAsync(m, opts...)
}

type lostAck struct {
	m   *nats.Msg
	ack *jetstream.PubAck
	err error
}

func (f lostAck) Ok() <-chan *jetstream.PubAck {
	ch := make(chan *jetstream.PubAck, 1)
	if f.err == nil {
		ch <- f.ack
	}
	return ch
}

func (f lostAck) Err() <-chan error {
	ch := make(chan error, 1)
	if f.err != nil {
		ch <- f.err
	}
	return ch
}

func (f lostAck) Msg() *nats.Msg { return f.m }

// TestJobLogFinalLineAckLost: the truncation notice is stored but its acknowledgement comes
// too late. Close still names the notice as the log's last line, and the notice is stored
// once: a reader that stops at the record's last line (invoke --wait) has it.
func TestJobLogFinalLineAckLost(t *testing.T) {
	ctx := context.Background()
	nc, js := natstest.Start(t)
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: bus.LogStream, Subjects: []string{bus.LogsPrefix + ">"}})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := newLogPublisher(nc)
	if err != nil {
		t.Fatal(err)
	}
	losing := &ackLosing{JetStream: pub}
	l := newJobLog(losing, zap.NewNop(), "f", "job1", "flow1", defaultLogLimits)
	for i := 1; i <= 100; i++ {
		l.Line("stdout", fmt.Appendf(nil, "line %d", i))
	}
	seq, lost := l.Close([]byte("[host] output truncated"))
	if !losing.lost.Load() {
		t.Fatal("no acknowledgement was lost: the test did not test anything")
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m, err := stream.GetMsg(ctx, seq)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != "[host] output truncated" || lost != 0 || info.State.Msgs != 101 || info.State.LastSeq != seq {
		t.Fatalf("Close named line %d (%q) as the last, lost %d; the stream holds %d lines, its last %d: want the notice once, last",
			seq, m.Data, lost, info.State.Msgs, info.State.LastSeq)
	}
}
