package bus

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

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

// Inbox prefixes. NATS delivers every reply, JetStream delivery and KV or object read to the
// requester's inbox, and anyone allowed to subscribe to an inbox subject sees what is sent to
// it. So the hosts (and the host's CLI, which connects as the hosts user) use a prefix of their
// own, which no caller permission covers: job records, lease records, volume chunks, secret
// envelopes, log lines and triggers fetched by a host all arrive under it. Each caller user
// gets a prefix named after it, so that one caller user's replies are not another's to read.
// `_INBOX.` itself, nats.go's and the NATS CLI's default, is left to setups without
// permissions: a caller that may subscribe to it sees every other client's replies there.
const (
	HostsInboxPrefix   = "_INBOX_hosts"
	CallersInboxPrefix = "_INBOX_callers" // the generated callers user's: CallerInboxPrefix(CallersUser)
)

// CallerInboxPrefix is the inbox prefix a caller user connects with: the only inbox subjects
// its permissions let it subscribe to.
func CallerInboxPrefix(user string) string { return "_INBOX_" + user }

// CallersPermissions are CallerPermissions for the generated callers user.
func CallersPermissions() *server.Permissions { return CallerPermissions(CallersUser) }

// CallerPermissions let a caller user trigger functions, read results and error events, and
// receive replies under its own inbox prefix, and nothing else: no JetStream API, no KV (job
// records, secrets), no object store (volumes), no logs, no inbox but its own. A JetStream
// publish needs no $JS.API permission: the stream acknowledges to the caller's inbox.
// agent.result.> and agent.error.> are broadcasts: every caller sees every result there.
func CallerPermissions(user string) *server.Permissions {
	return &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{"agent.run.>", "agent.call.>"}},
		Subscribe: &server.SubjectPermission{
			Allow: []string{CallerInboxPrefix(user) + ".>", "agent.result.>", "agent.error.>"},
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

// hasAuthorization reports whether the server's options make clients authenticate: users,
// nkeys, a token, operator JWTs, auth callout, or client certificates.
func hasAuthorization(o *server.Options) bool {
	return o.Username != "" || o.Authorization != "" || len(o.Users) > 0 || len(o.Nkeys) > 0 ||
		len(o.TrustedOperators) > 0 || len(o.TrustedKeys) > 0 || o.AuthCallout != nil || o.TLSVerify
}

// mutualTLS reports whether a listener's TLS makes the other side present a verified certificate.
func mutualTLS(c *tls.Config) bool {
	return c != nil && c.ClientAuth == tls.RequireAndVerifyClientCert
}

// openListeners names every listener of o that takes connections from beyond this machine
// without authorization. Clients, websocket, MQTT and leafnode connections are authorized by
// the server's users (or their own); a cluster route or a gateway sees every message, so it
// needs its own authorization or mutual TLS.
func openListeners(o *server.Options) []string {
	clientAuth := hasAuthorization(o)
	var open []string
	check := func(what, host string, port int, authed bool) {
		if port == 0 || authed || IsLoopback(host) {
			return
		}
		open = append(open, fmt.Sprintf("%s on %s", what, net.JoinHostPort(displayHost(host), strconv.Itoa(port))))
	}
	check("clients", o.Host, o.Port, clientAuth)
	check("websocket", o.Websocket.Host, o.Websocket.Port, clientAuth || o.Websocket.Username != "" || o.Websocket.Token != "")
	check("MQTT", o.MQTT.Host, o.MQTT.Port, clientAuth || o.MQTT.Username != "" || o.MQTT.Token != "")
	check("leafnodes", o.LeafNode.Host, o.LeafNode.Port, clientAuth || o.LeafNode.Username != "" || len(o.LeafNode.Users) > 0 || mutualTLS(o.LeafNode.TLSConfig))
	check("cluster routes", o.Cluster.Host, o.Cluster.Port, o.Cluster.Username != "" || mutualTLS(o.Cluster.TLSConfig))
	check("gateways", o.Gateway.Host, o.Gateway.Port, o.Gateway.Username != "" || mutualTLS(o.Gateway.TLSConfig))
	return open
}

func displayHost(h string) string {
	if h == "" {
		return "0.0.0.0"
	}
	return h
}
