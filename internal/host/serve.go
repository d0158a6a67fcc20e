package host

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/functions"
)

// served is one function version being served: its consumer and its fetch loops.
type served struct {
	fn      *functions.Function
	codeDir string
	cancel  context.CancelFunc
	loops   sync.WaitGroup
	since   time.Time // when this host started serving this version, as it announces

	mu       sync.Mutex
	consumer jetstream.Consumer // replaced when someone deletes it under us

	// annMu orders this version's announcements against its retirement, so that a heartbeat
	// that read the served set before a reload cannot announce a version after it left.
	annMu   sync.Mutex
	retired bool

	// An idle function waits with one pull, not one per slot: the slots after the first sleep
	// until a slot takes a message, and go back to sleep once nothing has been taken for
	// idleAfter and no slot holds a job. Each waiting pull costs the server and the host a
	// heartbeat every few seconds; with 200 functions of 2 slots that was most of an idle
	// host's CPU. A burst still fills every slot: the first message wakes the others at once.
	busyMu sync.Mutex
	busy   int           // jobs the slots hold
	taken  time.Time     // when a slot last took a message
	wake   chan struct{} // closed, and replaced, when a slot takes a message

	// pulls ends this function's waiting pulls when its consumer changed (renewPulls).
	pulls pullGeneration
}

// idleAfter is how long a function takes nothing, with no job running, before its extra
// slots stop pulling: one fetch's expiry, so that a slot sleeps after a pull that found nothing.
const idleAfter = fetchExpiry

// took marks a message taken by a slot, waking the slots that sleep.
func (s *served) took() {
	s.busyMu.Lock()
	defer s.busyMu.Unlock()
	s.busy++
	s.taken = time.Now()
	if s.wake != nil {
		close(s.wake)
		s.wake = nil
	}
}

// busyCount is how many of its slots (and its scout) are handling a message.
func (s *served) busyCount() int {
	s.busyMu.Lock()
	defer s.busyMu.Unlock()
	return s.busy
}

// finished marks a slot's job done.
func (s *served) finished() {
	s.busyMu.Lock()
	s.busy--
	s.busyMu.Unlock()
}

// awaitWork returns at once while the function is busy or was lately, and otherwise sleeps
// until a slot takes a message or ctx ends; false when ctx ended.
func (s *served) awaitWork(ctx context.Context) bool {
	s.busyMu.Lock()
	if s.busy > 0 || time.Since(s.taken) < idleAfter {
		s.busyMu.Unlock()
		return true
	}
	if s.wake == nil {
		s.wake = make(chan struct{})
	}
	wake := s.wake
	s.busyMu.Unlock()
	select {
	case <-wake:
		return true
	case <-ctx.Done():
		return false
	}
}

func (s *served) cons() jetstream.Consumer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.consumer
}

func (s *served) setCons(c jetstream.Consumer) {
	s.mu.Lock()
	s.consumer = c
	s.mu.Unlock()
}

// serve snapshots a function, binds its consumer and starts one fetch loop per run slot.
func (h *Host) serve(ctx context.Context, f *functions.Function) (*served, error) {
	codeDir, err := f.Snapshot(filepath.Join(h.cfg.DataDir, "functions"), h.cfg.SnapshotGroup)
	if err != nil {
		return nil, err
	}
	cons, err := bus.EnsureConsumer(ctx, h.stream, f.Name, f.Subjects(), h.cfg.AckWait, f.Spec.Queue, bus.WaitsForFlow(hasFlowControl(f)))
	if err != nil {
		return nil, err
	}
	h.warnOtherVersions(ctx, f)
	slots := h.slots(f)
	loopCtx, cancel := context.WithCancel(h.takeCtx)
	s := &served{fn: f, codeDir: codeDir, consumer: cons, cancel: cancel, since: time.Now()}
	h.announce(ctx, s)
	for slot := range slots {
		s.loops.Add(1)
		go func() {
			defer s.loops.Done()
			h.fetchLoop(loopCtx, s, slot == 0)
		}()
	}
	if f.Spec.Priority != nil {
		s.loops.Add(1)
		go func() {
			defer s.loops.Done()
			h.scoutLoop(loopCtx, s, slots)
		}()
	}
	return s, nil
}

// slots is how many jobs of f this host runs at once.
func (h *Host) slots(f *functions.Function) int {
	if f.Spec.Concurrency > 0 {
		return f.Spec.Concurrency
	}
	return h.cfg.Concurrency
}

// publishTick sends the trigger of one scheduled tick. Its message id is the same on every host,
// so the stream keeps one trigger per tick however many hosts serve the function.
func (h *Host) publishTick(ctx context.Context, function string, tick time.Time) error {
	msgID := h.ids.Tick(function, tick)
	m := nats.NewMsg(bus.RunSubject(function))
	m.Data = []byte("{}")
	m.Header.Set(bus.HeaderMsgID, msgID)
	m.Header.Set(bus.HeaderScheduledAt, tick.UTC().Format(time.RFC3339))
	ack, err := h.js.PublishMsg(ctx, m)
	if err != nil {
		return fmt.Errorf("publish tick of %s: %w", function, err)
	}
	if !ack.Duplicate {
		h.log.Info("scheduled run triggered", zap.String("function", function), zap.Time("tick", tick), zap.String("job_id", msgID))
	}
	return nil
}
