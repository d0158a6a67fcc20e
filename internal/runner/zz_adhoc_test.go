package runner

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agenthost/host/internal/jobtype"
)

func TestAdhocRunnerFork(t *testing.T) {
	r, dir := newJailRunner(t, WarmConfig{PerFunction: 1})
	r.cfg.Fork = true
	r.cfg.JobDisk = DefaultJobDisk
	fn, code := pythonFunction(t, dir, "noop", "v1", "def main():\n    return None\n")
	r.Warm(fn, code)
	waitTemplate(t, r, fn, code)
	for i := range 10 {
		t0 := time.Now()
		out, m := r.Run(context.Background(), fn, code, &jobtype.Job{ID: fmt.Sprintf("j%d", i), Payload: []byte("{}")})
		total := time.Since(t0)
		j := m.Jail
		t.Logf("%s laid %v | cgroup %v send %v sealed %v released %v | job %v | done %v | total-with-destroy %v", out.Served, m.Laid.Sub(m.Start), j.Cgroup.Sub(m.Laid), j.Forked.Sub(j.Cgroup), j.Built.Sub(j.Forked), j.Released.Sub(j.Built), j.Exited.Sub(j.Released), m.Done.Sub(j.Exited), total)
	}
}
