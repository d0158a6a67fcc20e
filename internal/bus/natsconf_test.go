package bus

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// The repository's nats.conf must stay a valid configuration that syncs every write.
func TestRepositoryNATSConfig(t *testing.T) {
	opts, err := server.ProcessConfigFile("../../nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	if !opts.JetStream || !opts.SyncAlways {
		t.Fatalf("nats.conf: jetstream %v, sync always %v", opts.JetStream, opts.SyncAlways)
	}
}

// Its commented cluster block, uncommented as a user would, is valid too and drops a silent
// node in seconds (the setting TestPartitions runs with).
func TestRepositoryNATSConfigCluster(t *testing.T) {
	b, err := os.ReadFile("../../nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile(`(?ms)^# cluster \{.*?^# \}$`).Find(b)
	if block == nil {
		t.Fatal("nats.conf has no commented cluster block")
	}
	conf := regexp.MustCompile(`(?m)^# ?`).ReplaceAll(block, nil)
	path := filepath.Join(t.TempDir(), "cluster.conf")
	if err := os.WriteFile(path, append([]byte("server_name: n1\n"), conf...), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats.conf's cluster block:\n%s\n%v", conf, err)
	}
	c := opts.Cluster
	if len(opts.Routes) != 3 || c.PingInterval != 3*time.Second || c.MaxPingsOut != 2 || c.WriteDeadline != 3*time.Second {
		t.Errorf("nats.conf's cluster block: %d routes, ping_interval %s, ping_max %d, write_deadline %s; want 3, 3s, 2, 3s",
			len(opts.Routes), c.PingInterval, c.MaxPingsOut, c.WriteDeadline)
	}
}
