package mcp

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
)

// inboxPrefix is where the answers to tool calls come. The face's connection is the host's own,
// whose inboxes (_INBOX_hosts) a host refuses as a call's reply subject: an answer there could
// pose as the reply to a host's own request. Answers to the face come to an inbox of its own.
const inboxPrefix = "_INBOX_mcp."

// replies receives the answers to the face's agent.calls on one subscription, as nats.go's
// request does for its own inboxes.
type replies struct {
	mu      sync.Mutex
	prefix  string
	sub     *nats.Subscription
	waiting map[string]chan *nats.Msg
}

// request publishes m with an inbox of the face's as its reply subject and waits for the answer.
func (r *replies) request(ctx context.Context, nc *nats.Conn, m *nats.Msg) (*nats.Msg, error) {
	token := nuid.Next()
	ch := make(chan *nats.Msg, 1)
	r.mu.Lock()
	if r.sub == nil {
		r.prefix = inboxPrefix + nuid.Next() + "."
		sub, err := nc.Subscribe(r.prefix+"*", r.deliver)
		if err != nil {
			r.mu.Unlock()
			return nil, fmt.Errorf("listen for answers on %s*: %w", r.prefix, err)
		}
		r.sub, r.waiting = sub, map[string]chan *nats.Msg{}
	}
	r.waiting[token] = ch
	m.Reply = r.prefix + token
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.waiting, token)
		r.mu.Unlock()
	}()
	// The subscription was sent before this publish on the same connection: the server has it
	// when the answer comes.
	if err := nc.PublishMsg(m); err != nil {
		return nil, fmt.Errorf("publish to %s: %w", m.Subject, err)
	}
	select {
	case a := <-ch:
		if len(a.Data) == 0 && a.Header.Get("Status") == "503" {
			return nil, nats.ErrNoResponders
		}
		return a, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// close stops listening: a job's endpoint (JobTools) ends with its job, and its subscription
// with it. A later request listens again.
func (r *replies) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sub != nil {
		_ = r.sub.Unsubscribe()
		r.sub = nil
	}
}

func (r *replies) deliver(m *nats.Msg) {
	r.mu.Lock()
	token, _ := strings.CutPrefix(m.Subject, r.prefix)
	ch := r.waiting[token]
	r.mu.Unlock()
	if ch != nil {
		select {
		case ch <- m:
		default: // a second answer (a rerun's): the first is the one
		}
	}
}
