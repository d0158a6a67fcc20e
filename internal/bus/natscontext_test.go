package bus

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadContext(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	if c, err := LoadContext(""); c != nil || err != nil {
		t.Fatalf("no selection: %v %v", c, err)
	}
	os.MkdirAll(filepath.Join(dir, "nats", "context"), 0o755)
	os.WriteFile(filepath.Join(dir, "nats", "context", "prod.json"), []byte(`{"url":"nats://prod:4222","creds":"/etc/prod.creds","description":"x"}`), 0o644)
	os.WriteFile(filepath.Join(dir, "nats", "context.txt"), []byte("prod\n"), 0o644)
	c, err := LoadContext("")
	if err != nil || c.URL != "nats://prod:4222" || c.Creds != "/etc/prod.creds" || c.Name != "prod" {
		t.Fatalf("selected: %+v %v", c, err)
	}
	if _, err := LoadContext("missing"); err == nil || !strings.Contains(err.Error(), "nats context ls") {
		t.Fatalf("missing: %v", err)
	}
	if _, err := LoadContext("../etc"); err == nil {
		t.Fatal("a path escaped the contexts directory")
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
				os.MkdirAll(filepath.Join(dir, "nats"), 0o700)
				os.WriteFile(filepath.Join(dir, "nats", "context.txt"), []byte(tc.selected+"\n"), 0o600)
			}
			if _, err := SaveContext(Context{Name: HostsContext, URL: "nats://127.0.0.1:4222", User: "hosts", Password: "pw"}, true); err != nil {
				t.Fatal(err)
			}
			st, err := os.Stat(filepath.Join(dir, "nats", "context", "host.json"))
			if err != nil || st.Mode().Perm() != 0o600 {
				t.Fatalf("context file: %v, mode %v; want 0600 (it holds a password)", err, st.Mode().Perm())
			}
			b, _ := os.ReadFile(filepath.Join(dir, "nats", "context.txt"))
			if got := strings.TrimSpace(string(b)); got != tc.wantSelect {
				t.Fatalf("selected %q, want %q", got, tc.wantSelect)
			}
			c, err := LoadContext(HostsContext)
			if err != nil || c.User != "hosts" || c.Password != "pw" || c.URL != "nats://127.0.0.1:4222" {
				t.Fatalf("read back %+v %v", c, err)
			}
		})
	}
}
