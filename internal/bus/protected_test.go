package bus

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap/zaptest"
)

// authConf is examples/nats-auth.conf, listening where the test says, with its store in dir.
func authConf(t *testing.T, listen, dir string) string {
	t.Helper()
	b, err := os.ReadFile("../../examples/nats-auth.conf")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), "listen: 0.0.0.0:4222", "listen: "+listen, 1)
	s = strings.Replace(s, `store_dir: "./data/nats"`, `store_dir: "`+filepath.Join(dir, "nats")+`"`, 1)
	p := filepath.Join(dir, "nats-auth.conf")
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestProtectedMode is the red team's row 12: an embedded server listening beyond loopback with
// no authorization serves the whole JetStream API (secrets bucket included) to the network. It
// must refuse to start, saying how to fix it; with authorization it starts and an anonymous
// client is turned away.
func TestProtectedMode(t *testing.T) {
	t.Setenv("HOSTS_PASSWORD", "hosts-pw")
	t.Setenv("CALLERS_PASSWORD", "callers-pw")
	cases := []struct {
		name    string
		listen  string
		config  func(t *testing.T, dir string) string
		auth    *Auth
		refused string // "" when the server must start
		anonOK  bool   // whether an anonymous client gets in
	}{
		{name: "loopback without auth", listen: "127.0.0.1:-1", anonOK: true},
		{name: "every interface without auth", listen: "0.0.0.0:-1", refused: "refusing to serve NATS clients on 0.0.0.0"},
		{name: "empty host without auth", listen: ":-1", refused: "refusing to serve NATS clients on 0.0.0.0"},
		{name: "config without auth", config: func(t *testing.T, dir string) string {
			return confFile(t, dir, "listen: 0.0.0.0:-1\n")
		}, refused: "clients on 0.0.0.0"},
		{name: "cluster routes on every interface without their own auth", config: func(t *testing.T, dir string) string {
			return confFile(t, dir, "server_name: t1\nlisten: 127.0.0.1:-1\ncluster { name: c, listen: 0.0.0.0:-1 }\n")
		}, refused: "cluster routes on 0.0.0.0"},
		{name: "websocket on every interface without auth", config: func(t *testing.T, dir string) string {
			return confFile(t, dir, "listen: 127.0.0.1:-1\nwebsocket { listen: 0.0.0.0:-1, no_tls: true }\n")
		}, refused: "websocket on 0.0.0.0"},
		{name: "leafnodes on every interface without auth", config: func(t *testing.T, dir string) string {
			return confFile(t, dir, "listen: 127.0.0.1:-1\nleafnodes { listen: 0.0.0.0:-1 }\n")
		}, refused: "leafnodes on 0.0.0.0"},
		{name: "config with users", config: func(t *testing.T, dir string) string { return authConf(t, "0.0.0.0:-1", dir) }},
		{name: "generated auth", listen: "0.0.0.0:-1", auth: &Auth{Hosts: Credential{"hosts", "h"}, Callers: Credential{"callers", "c"}}},
		{name: "generated auth and config auth", config: func(t *testing.T, dir string) string { return authConf(t, "127.0.0.1:-1", dir) },
			auth: &Auth{Hosts: Credential{"hosts", "h"}, Callers: Credential{"callers", "c"}}, refused: "do not mix"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := ServerConfig{Listen: tc.listen, StoreDir: filepath.Join(dir, "js"), Auth: tc.auth}
			if tc.config != nil {
				cfg.ConfigFile = tc.config(t, dir)
			}
			srv, err := StartServer(cfg, zaptest.NewLogger(t))
			if tc.refused != "" {
				if err == nil {
					defer srv.Shutdown()
					nc, cerr := nats.Connect(srv.ClientURL(), nats.Timeout(2*time.Second))
					if cerr == nil {
						defer nc.Close()
						if r, rerr := nc.Request("$JS.API.STREAM.LIST", nil, 2*time.Second); rerr == nil {
							t.Fatalf("started on %s and served the JetStream API anonymously: %s", srv.ClientURL(), r.Data)
						}
					}
					t.Fatalf("started; want refused with %q", tc.refused)
				}
				if !strings.Contains(err.Error(), tc.refused) || !strings.Contains(err.Error(), "--nats-auth") {
					t.Fatalf("refusal %q lacks %q or the way out (--nats-auth)", err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Shutdown()
			nc, err := nats.Connect(srv.ClientURL(), nats.Timeout(2*time.Second))
			if tc.anonOK != (err == nil) {
				t.Fatalf("anonymous client: err %v, want it let in: %v", err, tc.anonOK)
			}
			if nc != nil {
				nc.Close()
			}
			if !tc.anonOK {
				user, pw := "hosts", "hosts-pw"
				if tc.auth != nil {
					pw = tc.auth.Hosts.Password
				}
				nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(user, pw))
				if err != nil {
					t.Fatalf("the hosts user cannot connect: %v", err)
				}
				nc.Close()
			}
		})
	}
}

func TestLoadOrCreateAuth(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sub", "nats-auth.json")
	a, err := LoadOrCreateAuth(p)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("credentials file mode %v, want 0600 (%v)", st.Mode().Perm(), err)
	}
	if a.Hosts.User != HostsUser || a.Callers.User != CallersUser || len(a.Hosts.Password) < 40 || a.Hosts.Password == a.Callers.Password {
		t.Fatalf("generated %+v", a)
	}
	again, err := LoadOrCreateAuth(p)
	if err != nil || *again != *a {
		t.Fatalf("a restart must keep the passwords: %+v %v", again, err)
	}
}

// confFile writes a nats-server configuration with its JetStream store in dir.
func confFile(t *testing.T, dir, conf string) string {
	t.Helper()
	p := filepath.Join(dir, "test.conf")
	conf += "jetstream { store_dir: \"" + filepath.Join(dir, "js") + "\" }\n"
	if err := os.WriteFile(p, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
