package host

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/people"
)

// Who started a job. A record says who or what started its job (started_by) and, when a person
// did, that person's user name (starter), which the self-approval rule reads: the starter may
// not decide its flow's approvals. Any client that may publish agent.run.<fn> can write any
// header, so a host records a starter only when it can vouch for it:
//
//   - the Started-By headers carry a signature made with the hosts' key, bound to the message
//     id and the body (ids.StartSig): a face of the hosts set them (POST /run, the dashboard's
//     run form, a webhook, MCP, a host's own next step, or `host invoke` as the hosts user,
//     which asks a host to sign on bus.StartsVouchSubject);
//   - the trigger is a tick of the function's schedule (its message id is the tick's).
//
// Anything else is a claim: recorded as "a NATS client (says <claim>)", or "a NATS client" when
// nothing says, and never as a starter.

// Words of started_by for what the host knows by itself.
const (
	startedByClient = "a NATS client"
	maxStartedBy    = maxCaller
)

// startOf says who started a delivered trigger of function fn: started_by and starter, as the
// host can vouch for them (see above). tick is the trigger's schedule tick, zero for none.
func (h *Host) startOf(hdr nats.Header, data []byte, fn string, tick time.Time) (startedBy, starter string) {
	by, user, vouched := h.ids.Started(hdr, data)
	switch {
	case vouched:
		if !people.NameRE.MatchString(user) {
			user = "" // a host signs only names; this one is not
		}
		return cleanCaller(by), user
	case !tick.IsZero():
		return "schedule " + fn, ""
	case by != "":
		return startedByClient + " (says " + truncate(cleanCaller(by), maxStartedBy-30) + ")", ""
	}
	return startedByClient, ""
}

// vouchStep signs a message a job of rec publishes (its result, its error event, its next
// steps, its approval's announcement) as a step of rec's flow: a function that runs on it
// records "flow step <fn> (job <id>)" and inherits the flow's starter. m carries its message
// id already.
func (h *Host) vouchStep(m *nats.Msg, rec *jobs.Record) {
	ids.Vouch(m, h.ids.Derive, stepOf(rec), rec.Starter)
	h.signDeployment(m)
}

// vouchCarry signs m with what rec's own trigger said of its start, as the host recorded it: a
// join's step and its timeout are started by the flow's steps together, not by one of them.
func (h *Host) vouchCarry(m *nats.Msg, rec *jobs.Record) {
	ids.Vouch(m, h.ids.Derive, rec.StartedBy, rec.Starter)
	h.signDeployment(m)
}

// stepOf is started_by of what a job of rec starts.
func stepOf(rec *jobs.Record) string {
	return fmt.Sprintf("flow step %s (job %s)", rec.Function, rec.ID)
}

// subscribeVouch signs starts for the hosts' keyless faces, one host each. Only the hosts
// user may publish under agent.admin.>: a host takes its word, as it takes a decision's.
func (h *Host) subscribeVouch() (*nats.Subscription, error) {
	sub, err := h.nc.QueueSubscribe(bus.StartsVouchSubject, bus.AdminQueue, func(m *nats.Msg) {
		b, _ := json.Marshal(h.vouch(m.Data))
		if err := m.Respond(b); err != nil && !errors.Is(err, nats.ErrMsgNoReply) {
			h.log.Warn("cannot answer a request to sign who starts a trigger", zap.Error(err))
		}
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe to %s: %w", bus.StartsVouchSubject, err)
	}
	return sub, nil
}

func (h *Host) vouch(data []byte) jobs.VouchReply {
	var req jobs.VouchRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return jobs.VouchReply{Error: fmt.Sprintf("the request is not a VouchRequest (%v): send {\"msg_id\",\"body_sha256\",\"started_by\",\"starter\"}", err)}
	}
	switch {
	case !ids.Safe.MatchString(req.MsgID):
		return jobs.VouchReply{Error: fmt.Sprintf("msg_id %q is not a job id ([A-Za-z0-9_-], at most 64): only a message with its own id can be vouched for", abbreviate(req.MsgID, 80))}
	case len(req.BodySHA256) != 64:
		return jobs.VouchReply{Error: "body_sha256 is the hex SHA-256 of the trigger's body (64 characters)"}
	case req.StartedBy == "" || req.StartedBy != cleanCaller(req.StartedBy):
		return jobs.VouchReply{Error: fmt.Sprintf("started_by %q: say who starts it in at most %d printable characters", abbreviate(req.StartedBy, 80), maxStartedBy)}
	case req.Starter != "" && !people.NameRE.MatchString(req.Starter):
		return jobs.VouchReply{Error: fmt.Sprintf("starter %q is not a user name", abbreviate(req.Starter, 80))}
	}
	return jobs.VouchReply{Sig: ids.StartSig(h.ids.Derive, req.MsgID, req.StartedBy, req.Starter, req.BodySHA256)}
}
