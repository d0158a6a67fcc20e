package host

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/retry"
)

// logLimits bound how much of a job's output the host holds on its way to the log stream.
//
// A job that prints faster than the stream stores waits on its own pipe once its buffer is
// full (back-pressure on that job only): a log that drops lines under load would lose exactly
// the lines of the job someone is debugging, while a job slowed by its own printing is still
// correct, and its --max-output-bytes cap bounds how long the waiting lasts. Only when NATS does not take the
// lines at all (an outage) are lines dropped instead, and counted, so that a job never hangs on
// its log.
type logLimits struct {
	// queueBytes and queueLines bound the lines waiting to be published.
	queueBytes, queueLines int
	// pendingAcks bounds the lines published and not yet acknowledged by the stream. It is
	// the job's flow control: the server's ingest queue of the stream (100,000 messages by
	// default) holds the pending lines of hundreds of jobs at once, so no job's burst makes
	// the server drop another job's lines.
	pendingAcks int
}

var defaultLogLimits = logLimits{queueBytes: 1 << 20, queueLines: 4096, pendingAcks: 256}

// logAckWait is how long a line waits for the stream's acknowledgement before it counts as
// lost; past it, NATS is taken to be unreachable and the job's lines are dropped when its
// buffer is full.
const logAckWait = 10 * time.Second

// newLogPublisher is the JetStream context job logs are published with: its own, so that the
// bound on pending acknowledgements (every job's window together) and the ack timeout are the
// logs' and not those of the host's other publishes.
func newLogPublisher(nc *nats.Conn) (jetstream.JetStream, error) {
	return jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(256*defaultLogLimits.pendingAcks), jetstream.WithPublishAsyncTimeout(logAckWait))
}

// jobLog carries one job's output lines, one message per line, to agent.logs.<function>.<job>
// in the log stream: writers (the job's stdout and stderr, the host's own [host] lines) queue
// them, and a goroutine of the job's own publishes them in order with a bounded number of
// acknowledgements pending. Nothing a job prints blocks another job or the host.
type jobLog struct {
	js                     jetstream.JetStream
	log                    *zap.Logger
	subject, jobID, flowID string
	limits                 logLimits

	mu      sync.Mutex
	changed *sync.Cond // the queue, closed or failing changed
	queue   []*nats.Msg
	queued  int // bytes in queue
	closed  bool
	final   *nats.Msg // the line Close was given, published after every other one
	failing bool      // the last line was not stored: NATS is not taking lines
	lost    int
	lastSeq uint64
	done    chan struct{}
}

// openJobLog starts the publisher of one job's log; Close ends it.
func (h *Host) openJobLog(function, jobID, flowID string) *jobLog {
	return newJobLog(h.logJS, h.log, function, jobID, flowID, defaultLogLimits)
}

// newJobLog starts a job's log publisher on js (one from newLogPublisher) within limits.
func newJobLog(js jetstream.JetStream, log *zap.Logger, function, jobID, flowID string, limits logLimits) *jobLog {
	l := &jobLog{
		js: js, log: log, subject: bus.LogsSubject(function, jobID), jobID: jobID, flowID: flowID, limits: limits,
		done: make(chan struct{}),
	}
	l.changed = sync.NewCond(&l.mu)
	go l.run()
	return l
}

func (l *jobLog) msg(stream string, line []byte) *nats.Msg {
	m := nats.NewMsg(l.subject)
	m.Data = append([]byte(nil), line...)
	m.Header.Set(bus.HeaderJobID, l.jobID)
	m.Header.Set(bus.HeaderFlowID, l.flowID)
	m.Header.Set(bus.HeaderStream, stream)
	return m
}

// Line queues one output line; it is the job's jobtype.LineFunc. It waits while the job's
// buffer is full and NATS is taking lines.
func (l *jobLog) Line(stream string, line []byte) {
	m := l.msg(stream, line)
	l.mu.Lock()
	defer l.mu.Unlock()
	for !l.closed && !l.failing && l.full(len(m.Data)) {
		l.changed.Wait()
	}
	if l.closed || l.full(len(m.Data)) {
		l.lost++
		return
	}
	l.queue = append(l.queue, m)
	l.queued += len(m.Data)
	l.changed.Broadcast()
}

// full reports whether a line of n bytes must wait; a line is always taken into an empty
// queue, however long.
func (l *jobLog) full(n int) bool {
	return len(l.queue) > 0 && (len(l.queue) >= l.limits.queueLines || l.queued+n > l.limits.queueBytes)
}

// Close publishes what is queued, waits for the stream to acknowledge it, and reports the
// stream sequence of the last line stored (0 when none was) and how many lines were lost.
// Lines written after Close are lost.
//
// final, when not nil, is a stderr line that must end the log (the runner's truncation
// notice): it is published once every other line is acknowledged, so it is the last one
// stored, and it is never dropped for a full buffer or a stream that refused lines before it;
// its publish is tried again for a while if the stream refuses it too. A capped job's log
// used to lose that line when other jobs logged at the same time: the server refused some of
// its lines, and the writer then dropped the notice with them.
func (l *jobLog) Close(final []byte) (lastSeq uint64, lost int) {
	l.mu.Lock()
	if final != nil && !l.closed {
		l.final = l.msg("stderr", final)
	}
	l.closed = true
	l.changed.Broadcast()
	l.mu.Unlock()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastSeq, l.lost
}

func (l *jobLog) run() {
	defer close(l.done)
	var pending []jetstream.PubAckFuture
	for {
		l.mu.Lock()
		for len(l.queue) == 0 && !l.closed {
			l.changed.Wait()
		}
		batch, closed := l.queue, l.closed
		l.queue, l.queued = nil, 0
		l.changed.Broadcast() // room for the writers
		l.mu.Unlock()
		if len(batch) == 0 && closed {
			break
		}
		for _, m := range batch {
			if len(pending) == l.limits.pendingAcks {
				l.awaitAck(pending[0])
				pending = pending[1:]
			}
			f, err := l.js.PublishMsgAsync(m)
			if err != nil {
				l.failed(err)
				continue
			}
			pending = append(pending, f)
		}
	}
	for _, f := range pending {
		l.awaitAck(f)
	}
	if l.final != nil {
		l.publishFinal(l.final)
	}
}

// finalTries bounds the attempts at the final line; spaced by retry.FinalLine they last about
// as long as a line's ack wait.
const finalTries = 6

// publishFinal stores the log's last line, trying again while the stream refuses it. The line
// has a message id of its own: a busy server may store a try and answer after the try gave up,
// and the next try is then deduplicated, its acknowledgement naming the line stored. Without
// it the record named an earlier line as the log's last, `invoke --wait` returned before the
// notice, and the notice appeared a moment later (twice, once per try).
func (l *jobLog) publishFinal(m *nats.Msg) {
	m.Header.Set(jetstream.MsgIDHeader, l.jobID+"-log-end-"+ids.New())
	try := 0
	ack, err := retry.Do(context.Background(), retry.FinalLine, func() (*jetstream.PubAck, error) {
		try++
		ctx, cancel := context.WithTimeout(context.Background(), logAckWait)
		defer cancel()
		ack, err := l.js.PublishMsg(ctx, m)
		if errors.Is(err, nats.ErrConnectionClosed) {
			return nil, retry.Permanent(err)
		}
		return ack, err
	}, backoff.WithMaxTries(finalTries), backoff.WithNotify(func(err error, _ time.Duration) {
		l.log.Debug("the job log's last line was not acknowledged; trying again", zap.String("job_id", l.jobID), zap.Int("try", try), zap.Error(err))
	}))
	if err != nil {
		l.failed(err)
		return
	}
	l.mu.Lock()
	l.lastSeq = max(l.lastSeq, ack.Sequence)
	l.mu.Unlock()
}

// awaitAck waits for one line's acknowledgement.
func (l *jobLog) awaitAck(f jetstream.PubAckFuture) {
	select {
	case ack := <-f.Ok():
		l.mu.Lock()
		l.lastSeq = max(l.lastSeq, ack.Sequence)
		if l.failing {
			l.failing = false
			l.log.Info("job log lines are stored again", zap.String("job_id", l.jobID), zap.Int("lost", l.lost))
		}
		l.mu.Unlock()
	case err := <-f.Err():
		l.failed(err)
	}
}

// failed counts a line NATS did not store and lets the writers drop lines rather than wait.
func (l *jobLog) failed(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lost++
	if !l.failing {
		l.failing = true
		l.changed.Broadcast()
		level := l.log.Warn
		if errors.Is(err, nats.ErrConnectionClosed) {
			level = l.log.Debug // the host is stopping
		}
		level("job log lines are not being stored; lines are dropped and counted in the job record's log_lost until NATS takes them again",
			zap.String("job_id", l.jobID), zap.String("subject", l.subject), zap.Error(err))
	}
}

// attemptMark is the line a job's log gets where an attempt after the first starts, so that
// `host logs`, the dashboard and a download all show where one attempt ends and the next begins.
func attemptMark(attempt int, hostID string) []byte {
	return fmt.Appendf(nil, "[host] attempt %d starts here, on host %s; the lines above are the earlier attempts'", attempt, hostID)
}
