package mcp

import (
	"context"
	"net/http"
	"strconv"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// requestHeader carries, from ServeHTTP to a tool call's handler, the key under which the HTTP
// request that brought the call is tracked (posts): as for the principal (principalHeader), the
// SDK hands a handler the request's header, not its context. ServeHTTP deletes whatever a client
// sent under this name before it sets its own.
const requestHeader = "X-Agent-Host-Request"

// posts are the HTTP requests being served, by key, so that a tool call can end with the
// request that brought it.
//
// The SDK ties a call's context to its request only for the newest protocol (its
// PropagateRequestCancellation); on a session of the protocols clients speak today (Claude
// Code, the TypeScript SDK) a client that disconnects without sending notifications/cancelled
// first (it was killed, or it aborted the call and exited at once) left its call, and so its
// job, running on to the end. Its answer could not have been delivered anyway: the face keeps
// no event store, so a stream that is gone cannot be resumed. A disconnect is an abort.
type posts struct {
	mu   sync.Mutex
	next uint64
	ctxs map[string]context.Context
}

// track registers r's context under a fresh key, set in r's header; done forgets it.
func (p *posts) track(r *http.Request) (done func()) {
	r.Header.Del(requestHeader)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctxs == nil {
		p.ctxs = map[string]context.Context{}
	}
	p.next++
	key := strconv.FormatUint(p.next, 10)
	p.ctxs[key] = r.Context()
	r.Header.Set(requestHeader, key)
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		delete(p.ctxs, key)
	}
}

// of is the context of the HTTP request that brought a call, nil when it is not known (a call
// made other than over HTTP, or one whose request already ended).
func (p *posts) of(extra *sdk.RequestExtra) context.Context {
	if extra == nil || extra.Header == nil {
		return nil
	}
	key := extra.Header.Get(requestHeader)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ctxs[key]
}

// endWithRequest returns ctx canceled also when the HTTP request that brought req ends before
// the call does (its client went away); stop releases it.
func (s *Server) endWithRequest(ctx context.Context, req *sdk.CallToolRequest) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	rctx := s.posts.of(req.GetExtra())
	if rctx == nil {
		return ctx, cancel
	}
	unwatch := context.AfterFunc(rctx, cancel)
	return ctx, func() { unwatch(); cancel() }
}
