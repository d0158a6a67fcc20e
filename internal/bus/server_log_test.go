package bus

import (
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestServerBannerIsOneLine: the embedded server's startup banner is logged as one line
// carrying its version, name, listen address and JetStream directory.
func TestServerBannerIsOneLine(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	dir := t.TempDir()
	s, err := StartServer(ServerConfig{Listen: "127.0.0.1:-1", StoreDir: dir}, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	var ready []observer.LoggedEntry
	for _, e := range logs.All() {
		if strings.Contains(e.Message, "_ ___") || strings.Contains(e.Message, "Version:") || strings.Contains(e.Message, "JETSTREAM") {
			t.Errorf("banner line logged on its own: %q", e.Message)
		}
		if e.Message == "nats-server ready" {
			ready = append(ready, e)
		}
	}
	if len(ready) != 1 {
		t.Fatalf("want one ready line, got %d among %d lines", len(ready), logs.Len())
	}
	f := ready[0].ContextMap()
	if f["version"] == "" || f["name"] == "" || !strings.HasPrefix(f["listen"].(string), "127.0.0.1:") ||
		!strings.HasPrefix(f["jetstream_dir"].(string), dir) {
		t.Fatalf("ready line fields: %v", f)
	}
	if logs.Len() > 8 { // the ready line and shutdown's few
		for _, e := range logs.All() {
			t.Log(e.Message)
		}
		t.Fatalf("%d lines logged for a start and a stop", logs.Len())
	}
}
