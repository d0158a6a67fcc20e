package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/jobtype"
)

// A caller's login (a user's NATS login, or the callers user) has no JetStream API: it cannot
// read job records, logs or consumers, only publish the triggers its role allows and receive
// replies under its own inbox prefix. QueueAsCaller and CallAsCaller are `host invoke` for it,
// doing what a stock `nats pub` and `nats req` would.

// QueueAsCaller queues a run of function under job id as a JetStream publish to
// agent.run.<function>, acknowledged to the login's inbox: no $JS.API permission is needed.
func QueueAsCaller(ctx context.Context, nc *nats.Conn, function, id string, payload []byte) error {
	if err := CheckPayload(nc, function, payload); err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("open JetStream: %w", err)
	}
	m := nats.NewMsg(bus.RunSubject(function))
	m.Data = payload
	m.Header.Set(bus.HeaderMsgID, id)
	if _, err := js.PublishMsg(ctx, m); err != nil {
		if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
			return fmt.Errorf("queue job for %s: no stream takes %s: is a host running on this NATS?: %w", function, m.Subject, err)
		}
		return fmt.Errorf("queue job for %s: %w", function, err)
	}
	return nil
}

// CallOutcome is the reply to an agent.call: the result, or the job's error event.
type CallOutcome struct {
	Status jobtype.Status // succeeded or failed (a refusal before queueing is failed too)
	Result []byte         // the result, when it succeeded
	Error  jobs.ErrorEvent
}

// CallAsCaller runs function under job id through agent.call.<function> and waits for the
// reply until ctx ends: the hosts queue it durably and answer once it has run.
func CallAsCaller(ctx context.Context, nc *nats.Conn, function, id string, payload []byte) (*CallOutcome, error) {
	if err := CheckPayload(nc, function, payload); err != nil {
		return nil, err
	}
	m := nats.NewMsg(bus.CallSubject(function))
	m.Data = payload
	m.Header.Set(bus.HeaderMsgID, id)
	rep, err := nc.RequestMsgWithContext(ctx, m)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("call %s: no host answers %s: is `host serve` running on this NATS?: %w", function, m.Subject, ErrNotServed)
	}
	if err != nil {
		return nil, fmt.Errorf("call %s: %w", function, err)
	}
	out := &CallOutcome{Status: jobtype.Status(rep.Header.Get(bus.HeaderJobStatus))}
	if out.Status == jobtype.Succeeded {
		out.Result = rep.Data
		return out, nil
	}
	if out.Status != jobtype.Canceled {
		out.Status = jobtype.Failed
	}
	if err := json.Unmarshal(rep.Data, &out.Error); err != nil || out.Error.Error == "" {
		out.Error.Error = string(rep.Data)
	}
	return out, nil
}
