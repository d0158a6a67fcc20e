package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/people"
)

// Start says who starts a job, for its record's started_by and starter. A host records them
// as said only when they carry the hosts' signature (ids.Vouch); see Stamp.
type Start struct {
	// By is who or what starts it, in words: "user ada", "operator root@vm", "MCP client x".
	By string
	// Starter is the user name of the person who starts it; "" when no person does.
	Starter string
	// Sign signs with the hosts' key (ids.Key.Derive): a face inside a host has it.
	Sign func(parts ...string) string
	// AskHost has a host sign it (bus.StartsVouchSubject) when Sign is nil: for the hosts' own
	// keyless faces, connected as the hosts user (the CLI). Without either, By travels as an
	// unsigned claim, which the host records as "a NATS client (says …)" and never as a
	// starter.
	AskHost bool
}

// StartOf is what a face that authenticated p says of a job p starts: "user <name>" with p as
// the starter for a person, "operator <name>" for the operator's credentials.
func StartOf(p people.Principal) Start {
	if p.User {
		return Start{By: "user " + p.Name, Starter: p.Name}
	}
	return Start{By: "operator " + p.Name}
}

// vouchWait bounds asking a host to sign a start: a core request to a host that answers at once.
const vouchWait = 5 * time.Second

// Stamp sets m's Started-By headers as st says, signed when st can be (Sign, or a host asked
// with AskHost): m must carry its message id and body already. A host that cannot be asked
// leaves the claim unsigned, which err says; m is still usable.
func Stamp(ctx context.Context, nc *nats.Conn, m *nats.Msg, st Start) error {
	if st.By == "" {
		return nil
	}
	if st.Sign != nil && ids.Vouch(m, st.Sign, st.By, st.Starter) {
		return nil
	}
	m.Header.Set(bus.HeaderStartedBy, st.By)
	if !st.AskHost || nc == nil {
		return nil
	}
	sig, err := askVouch(ctx, nc, m, st)
	if err != nil {
		return err
	}
	if st.Starter != "" {
		m.Header.Set(bus.HeaderStarter, st.Starter)
	}
	m.Header.Set(bus.HeaderStartedBySig, sig)
	return nil
}

func askVouch(ctx context.Context, nc *nats.Conn, m *nats.Msg, st Start) (string, error) {
	body, _ := json.Marshal(jobs.VouchRequest{MsgID: m.Header.Get(bus.HeaderMsgID), BodySHA256: ids.BodySHA256(m.Data), StartedBy: st.By, Starter: st.Starter})
	ctx, cancel := context.WithTimeout(ctx, vouchWait)
	defer cancel()
	reply, err := nc.RequestWithContext(ctx, bus.StartsVouchSubject, body)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			err = fmt.Errorf("no host answers %s (hosts older than started_by, or none running): %w", bus.StartsVouchSubject, err)
		}
		return "", fmt.Errorf("have a host sign who starts the job: %w; its record says %q as a claim", err, st.By)
	}
	var rep jobs.VouchReply
	if err := json.Unmarshal(reply.Data, &rep); err != nil || rep.Sig == "" {
		if rep.Error == "" {
			rep.Error = "the answer is not a host's"
		}
		return "", fmt.Errorf("have a host sign who starts the job: %s; its record says %q as a claim", rep.Error, st.By)
	}
	return rep.Sig, nil
}
