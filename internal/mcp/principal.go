package mcp

import (
	"encoding/json"
	"net/http"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/host/internal/people"
	"github.com/agenthost/host/internal/webauth"
)

// principalHeader carries the web guard's principal from ServeHTTP to a tool call's handler:
// the SDK hands a handler the HTTP request's header (RequestExtra.Header), not its context.
// ServeHTTP deletes whatever a client sent under this name before it sets its own, so only the
// guard's word arrives.
const principalHeader = "X-Agent-Host-Principal"

// withPrincipal puts the guard's principal of r into r's header for the tool handlers.
func withPrincipal(r *http.Request) {
	r.Header.Del(principalHeader)
	if p, ok := webauth.PrincipalOf(r); ok {
		b, _ := json.Marshal(p)
		r.Header.Set(principalHeader, string(b))
	}
}

// mayCall refuses a call of fn by a principal the guard let in that may not run fn (a viewer,
// or a runner whose --functions glob leaves fn out): /mcp is a face like /run, and a tool call
// runs a function. A call with no principal is a job's own endpoint's, whose rights are its
// job's (rights).
func mayCall(extra *sdk.RequestExtra, fn string) error {
	if extra == nil || extra.Header == nil {
		return nil
	}
	raw := extra.Header.Get(principalHeader)
	if raw == "" {
		return nil
	}
	var p people.Principal
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		return people.ErrForbidden // the guard's own JSON: unreadable only if something is badly wrong
	}
	return p.May(people.Run, fn)
}
