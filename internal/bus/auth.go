package bus

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/nats-io/nats-server/v2/server"
)

// The users `serve --nats-auth` creates, and that examples/nats-auth.conf names too.
const (
	HostsUser   = "hosts"
	CallersUser = "callers"
)

// Credential is a NATS user and password.
type Credential struct {
	User     string `json:"user"`
	Password string `json:"password"`
}

// Auth is the generated authorization of `serve --nats-auth`: one user for hosts (and the
// operator's CLI), one for callers that only trigger functions and read their results.
type Auth struct {
	Hosts   Credential `json:"hosts"`
	Callers Credential `json:"callers"`
}

// CallersPermissions let a caller trigger functions and read results and replies, and nothing
// else: no JetStream API, no KV (job records, secrets), no object store (volumes). A JetStream
// publish needs no $JS.API permission: the stream acknowledges to the caller's inbox.
func CallersPermissions() *server.Permissions {
	return &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{"agent.run.>", "agent.call.>"}},
		Subscribe: &server.SubjectPermission{
			Allow: []string{"_INBOX.>", "agent.result.>", "agent.error.>"},
		},
	}
}

// Users are the server-side users of a; hosts get every subject, since they run the functions,
// keep the records and publish to whatever next: subjects the functions name.
func (a *Auth) Users() []*server.User {
	return []*server.User{
		{Username: a.Hosts.User, Password: a.Hosts.Password},
		{Username: a.Callers.User, Password: a.Callers.Password, Permissions: CallersPermissions()},
	}
}

// LoadOrCreateAuth reads the generated credentials at path, creating them (mode 0600) on first
// use, so that every start of the same host keeps the same passwords.
func LoadOrCreateAuth(path string) (*Auth, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		a := &Auth{}
		if err := json.Unmarshal(b, a); err != nil || a.Hosts.Password == "" || a.Callers.Password == "" {
			return nil, fmt.Errorf("read NATS credentials %s: not valid (%v); remove it to generate new ones", path, err)
		}
		return a, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read NATS credentials %s: %w", path, err)
	}
	a := &Auth{Hosts: Credential{User: HostsUser, Password: newPassword()}, Callers: Credential{User: CallersUser, Password: newPassword()}}
	if err := writePrivate(path, a); err != nil {
		return nil, fmt.Errorf("write NATS credentials %s: %w", path, err)
	}
	return a, nil
}

func newPassword() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	return base64.RawURLEncoding.EncodeToString(b)
}

// writePrivate writes v as JSON readable by its owner only, atomically.
func writePrivate(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path) // CreateTemp made it 0600
}

// IsLoopback reports whether a listen host only accepts connections from this machine. An
// empty host, 0.0.0.0 and :: listen on every interface; names other than localhost may resolve
// anywhere.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// hasAuthorization reports whether the server's options make clients authenticate.
func hasAuthorization(o *server.Options) bool {
	return o.Username != "" || o.Authorization != "" || len(o.Users) > 0 || len(o.Nkeys) > 0 ||
		len(o.TrustedOperators) > 0 || len(o.TrustedKeys) > 0 || o.AuthCallout != nil
}
