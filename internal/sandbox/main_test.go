package sandbox

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's run when a test leaves a goroutine behind. The one exception is
// a breach watcher's inotify reader, which serves its descriptor for the life of the process by
// design (watch.go): the process's watcher has one, and so has each watcher a test makes.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/agenthost/host/internal/sandbox.(*breachWatcher).read"))
}
