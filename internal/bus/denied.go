package bus

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/nats-io/nats.go"
)

// DeniedError is a permission violation the NATS server reported to a connection: its login
// may not publish to, or subscribe to, Subject. A user's NATS login (host users add --nats)
// meets it on anything its role does not allow.
type DeniedError struct {
	// Login is the NATS user the connection authenticated as; "" when unknown (a creds file).
	Login string
	// Op is "publish" or "subscribe".
	Op      string
	Subject string
	Err     error
}

var deniedRE = regexp.MustCompile(`Permissions Violation for (Publish|Subscription) to "([^"]+)"`)

// AsDenied reads a permission violation from err (as nats.go reports it to the connection's
// error handler); nil when err is none.
func AsDenied(login string, err error) *DeniedError {
	if err == nil || !errors.Is(err, nats.ErrPermissionViolation) {
		return nil
	}
	d := &DeniedError{Login: login, Err: err}
	if m := deniedRE.FindStringSubmatch(err.Error()); m != nil {
		d.Op, d.Subject = "publish", m[2]
		if m[1] == "Subscription" {
			d.Op = "subscribe"
		}
	}
	return d
}

// JetStreamAPI says the refused subject is the JetStream API, KV or object store: what every
// command that reads the hosts' state needs, and what no user's login has.
func (e *DeniedError) JetStreamAPI() bool {
	return strings.HasPrefix(e.Subject, "$JS.") || strings.HasPrefix(e.Subject, "$KV.") || strings.HasPrefix(e.Subject, "$O.")
}

func (e *DeniedError) Error() string {
	who := "your NATS login"
	if e.Login != "" {
		who += " " + e.Login
	}
	what := e.Op + " to " + e.Subject
	if e.Subject == "" {
		what = "an operation (" + e.Err.Error() + ")"
	}
	if e.JetStreamAPI() {
		return fmt.Sprintf("the NATS server refused %s to %s: a user's NATS login has no JetStream API (job records, users, secrets, volumes); "+
			"this command takes the hosts credentials (--context host), or a user's login on the web face", what, who)
	}
	return fmt.Sprintf("the NATS server refused %s to %s: the login's role does not allow it (`host users ls`, run with the hosts credentials, shows its role and functions)", what, who)
}

func (e *DeniedError) Unwrap() error { return e.Err }
