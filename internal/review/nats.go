package review

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/ids"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/voldiff"
)

// ShowRequest asks for job's approval as a person reviews it.
type ShowRequest struct {
	Job string `json:"job"`
}

// ShowReply is a host's answer: the view, or why there is none.
type ShowReply struct {
	Host     string `json:"host"`
	View     *View  `json:"view,omitempty"`
	Error    string `json:"error,omitempty"`
	NotFound bool   `json:"not_found,omitempty"` // no job has the id
}

// Server answers ShowRequests on bus.ApprovalsShowSubject, which only the hosts user may
// publish to (as only it may read job records and volumes): one host of the queue group each.
type Server struct {
	// Record reads a job's record; the error wraps jobs.ErrNotFound when there is none.
	Record  func(ctx context.Context, id string) (*jobs.Record, error)
	Volumes Differ // nil when the host has none
	HostID  string
	Log     *zap.Logger
	Timeout time.Duration // of one answer; zero: a minute
}

// Serve subscribes until the returned subscriptions are unsubscribed.
func (s *Server) Serve(nc *nats.Conn) ([]*nats.Subscription, error) {
	return bus.AdminSubscribe(nc, func(m *nats.Msg) {
		go s.answer(nc, m) // it reads the store; other requests do not wait behind it
	}, bus.ApprovalsShowSubject)
}

func (s *Server) answer(nc *nats.Conn, m *nats.Msg) {
	rep := s.show(m.Data)
	rep.Host = s.HostID
	b, _ := json.Marshal(rep)
	if int64(len(b)) > nc.MaxPayload() && rep.View != nil {
		// Paths of up to 4 KiB each can outgrow a message despite the bounds: say what changed
		// by counts, and where to see the rest.
		for i := range rep.View.Volumes {
			if d := rep.View.Volumes[i].Diff; d != nil {
				d.Unlisted, d.Files = d.Unlisted+len(d.Files), nil
			}
		}
		b, _ = json.Marshal(rep)
	}
	if err := m.Respond(b); err != nil && !errors.Is(err, nats.ErrMsgNoReply) {
		s.Log.Warn("cannot answer a request for an approval's diff; its sender times out", zap.Error(err))
	}
}

func (s *Server) show(data []byte) ShowReply {
	var req ShowRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return ShowReply{Error: fmt.Sprintf("the request is not a request to show an approval (%v): send {\"job\"}", err)}
	}
	if !ids.Safe.MatchString(req.Job) {
		return ShowReply{Error: fmt.Sprintf("job id %q is not one a host makes ([A-Za-z0-9_-], at most 64)", abbreviate(req.Job))}
	}
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	rec, err := s.Record(ctx, req.Job)
	if errors.Is(err, jobs.ErrNotFound) {
		return ShowReply{Error: err.Error(), NotFound: true}
	}
	if err != nil {
		return ShowReply{Error: fmt.Sprintf("read job %s: %v; try again", req.Job, err)}
	}
	v := Build(ctx, s.Volumes, rec, voldiff.Options{})
	return ShowReply{View: &v}
}

func abbreviate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// ErrNoJob is in Ask's error when no job has the id.
var ErrNoJob = errors.New("no such job")

// Ask asks a host for job id's approval as a person reviews it.
func Ask(ctx context.Context, nc *nats.Conn, id string) (*View, error) {
	body, _ := json.Marshal(ShowRequest{Job: id})
	m, err := nc.RequestWithContext(ctx, bus.ApprovalsShowSubject, body)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("show the approval of job %s: no host answered on %s: is a host running, and are these the hosts' NATS credentials (only they may ask)? %w", id, bus.ApprovalsShowSubject, err)
		}
		return nil, fmt.Errorf("show the approval of job %s: ask a host on %s: %w", id, bus.ApprovalsShowSubject, err)
	}
	var rep ShowReply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		return nil, fmt.Errorf("show the approval of job %s: the answer on %s is not a host's: %w", id, bus.ApprovalsShowSubject, err)
	}
	switch {
	case rep.NotFound:
		return nil, fmt.Errorf("show the approval of job %s: %w (host %s); `host approvals` lists the steps that wait", id, ErrNoJob, rep.Host)
	case rep.Error != "":
		return nil, fmt.Errorf("show the approval of job %s: host %s: %s", id, rep.Host, rep.Error)
	case rep.View == nil || rep.View.Record == nil:
		return nil, fmt.Errorf("show the approval of job %s: host %s answered without it", id, rep.Host)
	}
	return rep.View, nil
}
