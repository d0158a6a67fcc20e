package app

import (
	"path/filepath"
	"testing"

	"github.com/agenthost/host/internal/hooks"
	"github.com/agenthost/host/internal/host"
	"github.com/agenthost/host/internal/sandbox"
)

// The zero Config is usable: each zero field takes the default its comment names, and a set
// field is kept.
func TestConfigZeroValues(t *testing.T) {
	for _, c := range []struct {
		name  string
		in    Config
		check func(t *testing.T, c Config)
	}{
		{"zero", Config{}, func(t *testing.T, c Config) {
			if c.Workspace != DefaultWorkspace || c.JailUID != sandbox.DefaultUID || c.JailGID != sandbox.DefaultGID ||
				c.HookMaxBytes != hooks.DefaultMaxBytes || c.HookBodyTimeout != hooks.DefaultBodyTimeout ||
				c.HookMaxConcurrent != hooks.DefaultMaxConcurrent || c.AckWait != host.DefaultAckWait ||
				c.MaxHops != host.DefaultMaxHops || c.JobTTL != host.DefaultJobTTL || !filepath.IsAbs(c.DataDir) || c.HostID == "" {
				t.Fatalf("defaults not filled: %+v", c)
			}
		}},
		{"set", Config{Config: host.Config{MaxHops: 5, DataDir: "/srv/data"}, Workspace: "ws", JailUID: 1000, JailGID: 1000, HookMaxConcurrent: 2}, func(t *testing.T, c Config) {
			if c.MaxHops != 5 || c.DataDir != "/srv/data" || c.Workspace != "ws" || c.JailUID != 1000 || c.JailGID != 1000 || c.HookMaxConcurrent != 2 {
				t.Fatalf("set fields changed: %+v", c)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.in
			if err := cfg.setDefaults(); err != nil {
				t.Fatal(err)
			}
			c.check(t, cfg)
		})
	}
}
