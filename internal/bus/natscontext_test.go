package bus

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"go.uber.org/zap/zaptest"
)

// writeContext writes a NATS CLI context file as `nats context save` would.
func writeContext(t *testing.T, configHome, name string, fields map[string]any) {
	t.Helper()
	dir := filepath.Join(configHome, "nats", "context")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(fields)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// nkeySeedFile writes a new user nkey's seed, as `nk -gen user` does.
func nkeySeedFile(t *testing.T, dir string) string {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "user.nk")
	if err := os.WriteFile(p, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// selfSignedCert writes a certificate for 127.0.0.1 that is its own CA, and its key.
func selfSignedCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "natscontext test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestContextConnects: each context field that says how to connect is honoured, against a
// server that requires it, and without it the same server turns the client away.
func TestContextConnects(t *testing.T) {
	cases := []struct {
		name string
		// setup writes what the server and the context need into dir and returns the server's
		// configuration and the context's fields (less its url).
		setup func(t *testing.T, dir string) (conf string, fields map[string]any)
		// flagUser and flagPassword stand for --user and --password, which replace the
		// context's credentials.
		flagUser, flagPassword string
		check                  func(t *testing.T, nc *nats.Conn, url string)
	}{
		{name: "user and password", setup: func(t *testing.T, dir string) (string, map[string]any) {
			return `authorization { users: [{user: u, password: p}] }`, map[string]any{"user": "u", "password": "p"}
		}},
		{name: "flags replace the context's credentials", flagUser: "u", flagPassword: "p", setup: func(t *testing.T, dir string) (string, map[string]any) {
			// An nkey the server does not know, which nats.go would send alongside the user.
			return `authorization { users: [{user: u, password: p}] }`, map[string]any{"nkey": nkeySeedFile(t, dir)}
		}},
		{name: "nkey", setup: func(t *testing.T, dir string) (string, map[string]any) {
			seedFile := nkeySeedFile(t, dir)
			seed, err := os.ReadFile(seedFile)
			if err != nil {
				t.Fatal(err)
			}
			kp, err := nkeys.FromSeed(seed)
			if err != nil {
				t.Fatal(err)
			}
			pub, _ := kp.PublicKey()
			return `authorization { users: [{nkey: ` + pub + `}] }`, map[string]any{"nkey": seedFile}
		}},
		{name: "token", setup: func(t *testing.T, dir string) (string, map[string]any) {
			return `authorization { token: s3cret }`, map[string]any{"token": "s3cret"}
		}},
		{name: "TLS with a CA", setup: func(t *testing.T, dir string) (string, map[string]any) {
			cert, key := selfSignedCert(t, dir)
			return `tls { cert_file: "` + cert + `", key_file: "` + key + `" }`, map[string]any{"ca": cert}
		}, check: func(t *testing.T, nc *nats.Conn, _ string) {
			if _, err := nc.TLSConnectionState(); err != nil {
				t.Errorf("not over TLS: %v", err)
			}
		}},
		{name: "inbox prefix", setup: func(t *testing.T, dir string) (string, map[string]any) {
			// The requester may receive replies on _MY.> only.
			return `authorization { users: [
				{user: req, password: p, permissions: {publish: ["svc"], subscribe: ["_MY.>"]}}
				{user: svc, password: p}
			] }`, map[string]any{"user": "req", "password": "p", "inbox_prefix": "_MY"}
		}, check: func(t *testing.T, nc *nats.Conn, url string) {
			svc, err := nats.Connect(url, nats.UserInfo("svc", "p"))
			if err != nil {
				t.Fatal(err)
			}
			defer svc.Close()
			if _, err := svc.Subscribe("svc", func(m *nats.Msg) { m.Respond([]byte("pong")) }); err != nil {
				t.Fatal(err)
			}
			if err := svc.Flush(); err != nil {
				t.Fatal(err)
			}
			if inbox := nc.NewRespInbox(); !strings.HasPrefix(inbox, "_MY.") {
				t.Errorf("reply inbox %s, want _MY.*", inbox)
			}
			m, err := nc.Request("svc", nil, 10*time.Second)
			if err != nil || string(m.Data) != "pong" {
				t.Fatalf("request through the permitted inbox: %v %v", m, err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("XDG_CONFIG_HOME", dir)
			conf, fields := tc.setup(t, dir)
			srv, err := StartServer(ServerConfig{ConfigFile: confFile(t, dir, "listen: 127.0.0.1:-1\n"+conf+"\n")}, zaptest.NewLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Shutdown()
			url := srv.ClientURL()

			if nc, err := nats.Connect(url); err == nil {
				nc.Close()
				t.Fatalf("the server let a client in without what the context sets (%v)", fields)
			}

			fields["url"] = url
			writeContext(t, dir, "test", fields)
			if err := os.WriteFile(filepath.Join(dir, "nats", "context.txt"), []byte("test"), 0o600); err != nil {
				t.Fatal(err)
			}
			nctx, err := LoadContext("") // the selected one
			if err != nil || nctx == nil || nctx.Name != "test" || nctx.URL != url {
				t.Fatalf("LoadContext: %+v %v", nctx, err)
			}
			opts, err := nctx.Options(tc.flagUser != "")
			if err != nil {
				t.Fatal(err)
			}
			nc, err := Connect(context.Background(), ConnectOptions{URL: nctx.URL, User: tc.flagUser, Password: tc.flagPassword, Options: opts, Name: "t"}, zaptest.NewLogger(t))
			if err != nil {
				t.Fatalf("connect with context %v: %v", fields, err)
			}
			defer nc.Close()
			if tc.check != nil {
				tc.check(t, nc, url)
			}
		})
	}
}

func TestLoadContextErrors(t *testing.T) {
	cases := []struct {
		name    string
		fields  map[string]any // the context "ctx", when written
		load    string
		wantErr []string // parts of the error; none when LoadContext must return nil, nil
	}{
		{name: "none selected", load: ""},
		{name: "unknown name", load: "missing", wantErr: []string{`"missing"`, "nats context ls"}},
		{name: "path in the name", load: "../etc", wantErr: []string{`"../etc"`}},
		{name: "JetStream domain", fields: map[string]any{"url": "nats://h:4222", "jetstream_domain": "hub"}, load: "ctx",
			wantErr: []string{`"ctx"`, `jetstream_domain "hub"`, "ctx.json"}},
		{name: "JetStream API prefix", fields: map[string]any{"url": "nats://h:4222", "jetstream_api_prefix": "$JS.x.API"}, load: "ctx",
			wantErr: []string{"jetstream_api_prefix"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("XDG_CONFIG_HOME", dir)
			if tc.fields != nil {
				writeContext(t, dir, "ctx", tc.fields)
			}
			c, err := LoadContext(tc.load)
			if len(tc.wantErr) == 0 {
				if c != nil || err != nil {
					t.Fatalf("LoadContext(%q) = %+v, %v; want nil, nil", tc.load, c, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("LoadContext(%q) = %+v, want an error", tc.load, c)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestSaveContext(t *testing.T) {
	cases := []struct {
		name       string
		selected   string // the context selected before
		wantSelect string
	}{
		{"nothing selected: selects it", "", "host"},
		{"another selected: leaves it", "prod", "prod"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("XDG_CONFIG_HOME", dir)
			if tc.selected != "" {
				writeContext(t, dir, tc.selected, map[string]any{"url": "nats://prod:4222"})
				os.WriteFile(filepath.Join(dir, "nats", "context.txt"), []byte(tc.selected+"\n"), 0o600)
			}
			saved, err := SaveContext(Context{Name: HostsContext, URL: "nats://127.0.0.1:4222", User: "hosts", Password: "pw", InboxPrefix: HostsInboxPrefix}, true)
			if err != nil || saved.Name != HostsContext || saved.Displaced != "" || saved.SelectedName != tc.wantSelect {
				t.Fatalf("saved %+v, %v", saved, err)
			}
			st, err := os.Stat(filepath.Join(dir, "nats", "context", "host.json"))
			if err != nil || st.Mode().Perm() != 0o600 {
				t.Fatalf("context file: %v, mode %v; want 0600 (it holds a password)", err, st.Mode().Perm())
			}
			if got := selected(t, dir); got != tc.wantSelect {
				t.Fatalf("selected %q, want %q", got, tc.wantSelect)
			}
			c, err := LoadContext(HostsContext)
			if err != nil || c.URL != "nats://127.0.0.1:4222" || c.nctx.User() != "hosts" || c.nctx.Password() != "pw" || c.nctx.InboxPrefix() != HostsInboxPrefix {
				t.Fatalf("read back %+v %v", c, err)
			}
		})
	}
}

func selected(t *testing.T, configHome string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(configHome, "nats", "context.txt"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// `serve --nats-auth` run with HOME set elsewhere (a service user, sudo -E, a test) wrote the
// contexts into the account's home from the user database, /root/.config, not $HOME.
func TestContextsFollowHOME(t *testing.T) {
	home := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("HOME", home)
	if _, err := SaveContext(Context{Name: HostsContext, URL: "nats://127.0.0.1:4222", User: "hosts", Password: "pw"}, true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(home, ".config", "nats", "context", "host.json")); err != nil {
		t.Fatalf("the context is not under $HOME/.config: %v", err)
	}
	if got := selected(t, filepath.Join(home, ".config")); got != HostsContext {
		t.Fatalf("selected %q under $HOME, want host", got)
	}
	c, err := LoadContext("")
	if err != nil || c == nil || c.Name != HostsContext {
		t.Fatalf("the selected context read from $HOME: %+v %v", c, err)
	}
	root, err := ConfigRoot()
	if err != nil || root != filepath.Join(home, ".config") {
		t.Fatalf("ConfigRoot %q %v", root, err)
	}
	xdg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", xdg)
	if root, _ := ConfigRoot(); root != xdg {
		t.Fatalf("ConfigRoot with $XDG_CONFIG_HOME: %q", root)
	}
}

// A second `serve --nats-auth` (another data directory, another port) rewrote the selected
// context "host", so a later `host secrets set` went to the second server without a word. It
// now gets a context of its own, the selection stays, and so does the first server's context;
// a context serve did not write is never replaced, even for the same server.
func TestSecondServeKeepsTheSelectedContext(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	first := Context{Name: HostsContext, URL: "nats://127.0.0.1:4222", User: "hosts", Password: "first", InboxPrefix: HostsInboxPrefix}
	if saved, err := SaveContext(first, true); err != nil || !saved.Selected {
		t.Fatalf("first serve: %+v %v", saved, err)
	}
	second := Context{Name: HostsContext, URL: "nats://127.0.0.1:4333", User: "hosts", Password: "second", InboxPrefix: HostsInboxPrefix}
	saved, err := SaveContext(second, true)
	if err != nil || saved.Name != "host-4333" || saved.Displaced != first.URL || saved.Selected || saved.SelectedName != HostsContext {
		t.Fatalf("second serve: %+v %v; want host-4333, the first kept and still selected", saved, err)
	}
	if got := selected(t, dir); got != HostsContext {
		t.Fatalf("selected %q after the second serve, want host", got)
	}
	if c, err := LoadContext(""); err != nil || c.URL != first.URL || c.nctx.Password() != "first" {
		t.Fatalf("the selected context now reaches %+v (%v), want the first server", c, err)
	}
	if c, err := LoadContext("host-4333"); err != nil || c.URL != second.URL || c.nctx.Password() != "second" {
		t.Fatalf("the second server's context: %+v %v", c, err)
	}
	// Each restarts: each rewrites its own context, and only its own.
	second.Password = "second-again"
	if saved, err := SaveContext(second, true); err != nil || saved.Name != "host-4333" {
		t.Fatalf("the second serve again: %+v %v", saved, err)
	}
	first.Password = "first-again"
	if saved, err := SaveContext(first, true); err != nil || saved.Name != HostsContext || saved.Displaced != "" {
		t.Fatalf("the first serve again: %+v %v", saved, err)
	}
	if c, _ := LoadContext(HostsContext); c.nctx.Password() != "first-again" {
		t.Fatal("the first serve did not rewrite its own context")
	}

	// A context of the user's own under the name, for the very same server: kept.
	writeContext(t, dir, CallersContext, map[string]any{"url": first.URL, "user": "app", "password": "mine"})
	saved, err = SaveContext(Context{Name: CallersContext, URL: first.URL, User: "callers", Password: "gen"}, false)
	if err != nil || saved.Name != "host-callers-4222" || saved.Displaced != first.URL {
		t.Fatalf("over a context serve did not write: %+v %v", saved, err)
	}
	if c, _ := LoadContext(CallersContext); c.nctx.Password() != "mine" {
		t.Fatal("serve replaced a context it did not write")
	}
}
