package runner

import (
	"time"

	"github.com/agenthost/host/internal/sandbox"
)

// Marks are the moments one run passed on the host's side, read from the clock as it passed
// them, so that `host bench` can say where a cold job's time goes. A step the run did not take
// stays zero.
type Marks struct {
	Start  time.Time     // Run was called
	Laid   time.Time     // payload checked, secrets resolved, job directory, volumes, packages, command
	Egress time.Time     // the job's egress proxy socket is served (`network: proxy` only)
	Jail   sandbox.Marks // the jail's own steps, up to every process of the job being gone
	Done   time.Time     // outputs read, volumes committed: the outcome is there
}
