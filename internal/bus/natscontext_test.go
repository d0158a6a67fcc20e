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
