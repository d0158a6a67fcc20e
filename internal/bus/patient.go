package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/retry"
)

// Patient returns js with its stream, bucket and consumer administration (create or update,
// look up) retried while JetStream does not answer, for up to PatientFor or until the call's
// context ends.
//
// Why: a cluster that has just lost a node, or one being started, spends seconds electing its
// meta leader and its streams' leaders, and answers nothing meanwhile. A host starting then
// (restarted by its service manager after a crash, beside a node that restarts too) failed its
// first bucket open after the client's 5 s and exited: TestPartitions saw it on every SIGKILL
// of a host and a node. Every call retried here is idempotent (create-or-update, a lookup), so a
// retry whose first attempt did get through changes nothing. Writes of data are not retried
// here: their callers decide (a record, an output, a publish each have their own policy).
func Patient(js jetstream.JetStream, log *zap.Logger) jetstream.JetStream {
	return &patient{JetStream: js, log: log}
}

// PatientFor bounds how long Patient retries one call.
const PatientFor = 2 * time.Minute

// patientAttempt bounds one attempt: a meta leader elected meanwhile answers the next.
const patientAttempt = 10 * time.Second

type patient struct {
	jetstream.JetStream
	log *zap.Logger
}

// jsClusterNotAvailable is the server's "JetStream system temporarily unavailable": a
// cluster without a meta leader (nats-server's JSClusterNotAvailErr; nats.go names no constant).
const jsClusterNotAvailable jetstream.ErrorCode = 10008

// unanswered reports whether err is JetStream not answering (yet), as opposed to an answer.
func unanswered(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == jsClusterNotAvailable
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

// patiently runs call until JetStream answers it (with a result or a refusal), ctx ends, or
// PatientFor has passed.
func patiently[T any](ctx context.Context, p *patient, what string, call func(context.Context) (T, error)) (T, error) {
	start := time.Now()
	attempt := 0
	var last error
	v, err := retry.Do(ctx, retry.Admin.Within(PatientFor), func() (T, error) {
		attempt++
		actx, cancel := context.WithTimeout(ctx, patientAttempt)
		v, err := call(actx)
		cancel()
		last = err
		if err != nil && !unanswered(err) {
			return v, retry.Permanent(err) // an answer, if a refusal
		}
		return v, err
	}, backoff.WithNotify(func(err error, _ time.Duration) {
		if attempt == 1 {
			p.log.Warn("JetStream does not answer yet (a cluster electing its leaders answers nothing for seconds); trying again",
				zap.String("call", what), zap.Duration("for_up_to", PatientFor), zap.Error(err))
		}
	}))
	if err != nil {
		err = last // not the context's, which says less
	}
	switch {
	case attempt == 1:
	case err == nil:
		p.log.Info("JetStream answered", zap.String("call", what), zap.Int("attempts", attempt), zap.Duration("after", time.Since(start)))
	case unanswered(err):
		err = fmt.Errorf("%s: JetStream did not answer in %s (%d attempts); check that its server runs and, in a cluster, that a majority of its nodes reach each other (`nats server report jetstream`): %w",
			what, time.Since(start).Round(time.Second), attempt, err)
	}
	return v, err
}

func (p *patient) CreateOrUpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	return patiently(ctx, p, "create or update stream "+cfg.Name, func(ctx context.Context) (jetstream.Stream, error) {
		return p.JetStream.CreateOrUpdateStream(ctx, cfg)
	})
}

func (p *patient) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	return patiently(ctx, p, "look up stream "+name, func(ctx context.Context) (jetstream.Stream, error) {
		return p.JetStream.Stream(ctx, name)
	})
}

func (p *patient) CreateOrUpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	return patiently(ctx, p, "create or update bucket "+cfg.Bucket, func(ctx context.Context) (jetstream.KeyValue, error) {
		return p.JetStream.CreateOrUpdateKeyValue(ctx, cfg)
	})
}

func (p *patient) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	return patiently(ctx, p, "look up bucket "+bucket, func(ctx context.Context) (jetstream.KeyValue, error) {
		return p.JetStream.KeyValue(ctx, bucket)
	})
}

func (p *patient) CreateOrUpdateObjectStore(ctx context.Context, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	return patiently(ctx, p, "create or update object store "+cfg.Bucket, func(ctx context.Context) (jetstream.ObjectStore, error) {
		return p.JetStream.CreateOrUpdateObjectStore(ctx, cfg)
	})
}

func (p *patient) ObjectStore(ctx context.Context, bucket string) (jetstream.ObjectStore, error) {
	return patiently(ctx, p, "look up object store "+bucket, func(ctx context.Context) (jetstream.ObjectStore, error) {
		return p.JetStream.ObjectStore(ctx, bucket)
	})
}

func (p *patient) CreateOrUpdateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	return patiently(ctx, p, "create or update consumer "+cfg.Durable+" of "+stream, func(ctx context.Context) (jetstream.Consumer, error) {
		return p.JetStream.CreateOrUpdateConsumer(ctx, stream, cfg)
	})
}
