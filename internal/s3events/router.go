package s3events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/ids"
)

// ConsumerName is the router's durable consumer on the trigger stream, shared by every host.
const ConsumerName = "src_s3"

// Router routes the S3 events on Subject to the functions whose on: s3: line names their
// bucket and prefix. The host tells it the served functions (Route) each time they change;
// Run reads the events once some function listens.
type Router struct {
	JS jetstream.JetStream
	// Subject is where the S3 server publishes; DefaultSubject when empty.
	Subject string
	// IDs derives the triggers' message ids, so every host derives the same for one event.
	IDs     ids.Key
	Streams bus.StreamOptions
	AckWait time.Duration
	Log     *zap.Logger

	mu     sync.Mutex
	routes []route
	ready  chan struct{} // closed once a route exists
}

type route struct {
	fn string
	on annot.S3On
}

func (r *Router) subject() string {
	if r.Subject == "" {
		return DefaultSubject
	}
	return r.Subject
}

// Route takes the served functions and names the subject the trigger stream must capture for
// them: the events subject when one listens, none otherwise.
func (r *Router) Route(fns map[string]*functions.Function) []string {
	var rs []route
	for name, f := range fns {
		for _, on := range f.Spec.S3 {
			rs = append(rs, route{fn: name, on: on})
		}
	}
	slices.SortFunc(rs, func(a, b route) int { return strings.Compare(a.fn, b.fn) })
	r.mu.Lock()
	defer r.mu.Unlock()
	r.routes = rs
	if r.ready == nil {
		r.ready = make(chan struct{})
	}
	if len(rs) == 0 {
		return nil
	}
	select {
	case <-r.ready:
	default:
		close(r.ready)
	}
	return []string{r.subject()}
}

func (r *Router) readyCh() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ready == nil {
		r.ready = make(chan struct{})
	}
	return r.ready
}

// Run waits until a served function listens on a bucket, then routes events until ctx ends.
func (r *Router) Run(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-r.readyCh():
	}
	var cons jetstream.Consumer
	for {
		var err error
		if cons, err = r.consumer(ctx); err == nil {
			break
		}
		r.Log.Error("S3 events not read yet; trying again in 5s (is NATS reachable?)", zap.String("subject", r.subject()), zap.Error(err))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(5 * time.Second):
		}
	}
	cc, err := cons.Consume(func(m jetstream.Msg) { r.handle(ctx, m) })
	if err != nil {
		return fmt.Errorf("read S3 events on %s: %w", r.subject(), err)
	}
	r.Log.Info("routing S3 bucket notifications", zap.String("subject", r.subject()))
	<-ctx.Done()
	cc.Drain()
	<-cc.Closed()
	return nil
}

func (r *Router) consumer(ctx context.Context) (jetstream.Consumer, error) {
	s, err := bus.EnsureRunStream(ctx, r.JS, []string{r.subject()}, r.Streams)
	if err != nil {
		return nil, err
	}
	c, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:        ConsumerName,
		Description:    "S3 bucket notifications on " + r.subject() + ", routed to the on: s3: functions",
		FilterSubjects: []string{r.subject()},
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        max(r.AckWait, 5*time.Second),
		MaxDeliver:     bus.MaxDeliver,
		MaxAckPending:  1000,
	})
	if err != nil {
		return nil, fmt.Errorf("create consumer %s on %s: %w", ConsumerName, r.subject(), err)
	}
	return c, nil
}

// handle queues one trigger per record and listening function, then acknowledges the event. A
// trigger NATS does not take hands the whole event back: those already queued deduplicate.
func (r *Router) handle(ctx context.Context, m jetstream.Msg) {
	recs, err := Parse(m.Data())
	if errors.Is(err, ErrTestEvent) {
		r.Log.Info("S3 test event ignored", zap.String("subject", m.Subject()))
		_ = m.Ack()
		return
	}
	if err != nil {
		r.Log.Error("malformed S3 event dropped: the S3 server should publish the AWS S3 event format here",
			zap.String("subject", m.Subject()), zap.ByteString("start", head(m.Data(), 200)), zap.Error(err))
		_ = m.Term()
		return
	}
	for _, rec := range recs {
		if err := r.route(ctx, rec); err != nil {
			r.Log.Error("S3 event not queued; it is tried again in 5s", zap.String("bucket", rec.Bucket), zap.String("key", rec.Key), zap.Error(err))
			_ = m.NakWithDelay(5 * time.Second)
			return
		}
	}
	_ = m.Ack()
}

// route queues rec for every function listening on it, or says why none does.
func (r *Router) route(ctx context.Context, rec Record) error {
	var fns []string
	r.mu.Lock()
	for _, rt := range r.routes {
		if rt.on.Bucket == rec.Bucket && strings.HasPrefix(rec.Key, rt.on.Prefix) &&
			(rec.Kind == Created && rt.on.Created || rec.Kind == Removed && rt.on.Removed) && !slices.Contains(fns, rt.fn) {
			fns = append(fns, rt.fn)
		}
	}
	listening := r.describe()
	r.mu.Unlock()
	if len(fns) == 0 {
		r.Log.Warn("S3 event dropped: no function listens on its bucket, prefix and kind",
			zap.String("bucket", rec.Bucket), zap.String("key", rec.Key), zap.String("event", rec.Event), zap.Strings("listening", listening))
		return nil
	}
	body, err := json.Marshal(rec.Args)
	if err != nil {
		return err
	}
	for _, fn := range fns {
		id := r.IDs.Derive(append([]string{"s3", fn}, rec.ID()...)...)
		msg := nats.NewMsg(bus.RunSubject(fn))
		msg.Data = body
		msg.Header.Set(jetstream.MsgIDHeader, id)
		msg.Header.Set(bus.HeaderFlowID, id)
		ids.Vouch(msg, r.IDs.Derive, "s3 "+rec.Bucket, "")
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ack, err := r.JS.PublishMsg(pctx, msg)
		cancel()
		if err != nil {
			return fmt.Errorf("queue %s on %s: %w", rec.Key, bus.RunSubject(fn), err)
		}
		r.Log.Info("S3 event queued", zap.String("function", fn), zap.String("job_id", id), zap.String("bucket", rec.Bucket),
			zap.String("key", rec.Key), zap.String("event", rec.Event), zap.Bool("duplicate", ack.Duplicate))
	}
	return nil
}

// describe names what the served functions listen on, for the log line of a dropped event.
func (r *Router) describe() []string {
	out := make([]string, 0, len(r.routes))
	for _, rt := range r.routes {
		var kinds []string
		if rt.on.Created {
			kinds = append(kinds, "created")
		}
		if rt.on.Removed {
			kinds = append(kinds, "removed")
		}
		out = append(out, fmt.Sprintf("%s: s3:%s/%s %s", rt.fn, rt.on.Bucket, rt.on.Prefix, strings.Join(kinds, ",")))
	}
	return out
}

func head(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
