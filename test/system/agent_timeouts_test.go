package system_test

import (
	"testing"
	"time"

	"github.com/agenthost/host/internal/functions"
)

// TestAgentTemplatesHaveTimeouts: claude.ts ran on for minutes (the host's 15-minute default)
// when its model API was unreachable, its agent retrying the calls. Every agent template and
// example says how long it may take, at most 10 minutes.
func TestAgentTemplatesHaveTimeouts(t *testing.T) {
	for _, path := range []string{
		"../../functions/claude.ts",
		"../../functions/codex.ts",
		"../../functions/opencode.ts",
		"../../examples/flows/incident/investigate.ts",
		"../../examples/flows/github-triage/summarize.ts",
	} {
		f, err := functions.LoadPath(path)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		if f.Spec.Timeout <= 0 || f.Spec.Timeout > 10*time.Minute {
			t.Errorf("%s: timeout %s; want a timeout: line of at most 10m", path, f.Spec.Timeout)
		}
	}
}
