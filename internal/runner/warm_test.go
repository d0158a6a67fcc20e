package runner

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/runtimes"
	"github.com/agenthost/host/internal/sandbox"
)

func TestHandoffWriter(t *testing.T) {
	cases := []struct {
		name          string
		before, after []string
		want          string
	}{
		{"nothing before", nil, []string{"a\n"}, "a\n"},
		{"before goes first", []string{"top\n", "level\n"}, []string{"job\n"}, "top\nlevel\njob\n"},
		{"before is bounded", []string{strings.Repeat("x", warmEarlyOutput), "dropped"}, []string{"!"}, strings.Repeat("x", warmEarlyOutput) + "!"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var h handoffWriter
			var out bytes.Buffer
			for _, s := range c.before {
				if n, err := h.Write([]byte(s)); n != len(s) || err != nil {
					t.Fatalf("Write before attach = %d, %v: a waiting jail must never see a short write", n, err)
				}
			}
			h.attach(&out)
			for _, s := range c.after {
				h.Write([]byte(s))
			}
			if out.String() != c.want {
				t.Fatalf("got %d bytes %.40q, want %d bytes %.40q", out.Len(), out.String(), len(c.want), c.want)
			}
		})
	}
}

// newJailRunner is a runner on the real jail, with warm jails capped by warm.
func newJailRunner(t *testing.T, warm WarmConfig) (*Runner, string) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("SKIPPED LOUDLY: bubblewrap (bwrap) is not installed; .ci/run installs it")
	}
	dir, err := os.MkdirTemp("", "runner-warm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	jail, err := sandbox.NewBwrap(sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	shims := filepath.Join(dir, "shims")
	if err := runtimes.WriteShims(shims); err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{RunDir: filepath.Join(dir, "run"), ShimDir: shims, Jail: jail, MaxResultBytes: 1 << 20, Warm: warm})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, dir
}

// bashFunction writes a sandboxed bash function into its own snapshot directory.
func bashFunction(t *testing.T, root, name, src string, memory int64) (*functions.Function, string) {
	t.Helper()
	code := filepath.Join(root, "code-"+name)
	if err := os.Mkdir(code, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(code, name+".sh"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return &functions.Function{Name: name, Entry: name + ".sh", Runtime: runtimes.Bash, Hash: name,
		Spec: &annot.Spec{Sandbox: true, Memory: memory, Network: annot.Network{Mode: annot.NetworkNone}}}, code
}

func (ps *warmPools) counts() (jails int, waiting map[string]int) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	waiting = map[string]int{}
	for name, p := range ps.pools {
		waiting[name] = len(p.ready) + p.starting
	}
	return ps.jails, waiting
}

// TestWarmCaps: the host's caps bound the warm jails of all functions together, by count and
// by the memory they reserve; Cool and Close leave none.
func TestWarmCaps(t *testing.T) {
	cases := []struct {
		name    string
		cfg     WarmConfig
		memory  int64 // each function's memory:
		want    int   // jails per function asked
		wantAll int   // jails the host keeps
	}{
		{"under the caps", WarmConfig{Max: 10}, 0, 2, 6},
		{"count cap", WarmConfig{Max: 4}, 0, 2, 4},
		{"memory cap", WarmConfig{Max: 10, MaxMemory: 5 * WarmReserve}, 0, 2, 5},
		{"memory: limits reserve", WarmConfig{Max: 10, MaxMemory: 1 << 30}, 300 << 20, 2, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, dir := newJailRunner(t, c.cfg)
			var names []string
			for i := range 3 {
				fn, code := bashFunction(t, dir, fmt.Sprintf("f%d", i), "echo '\"ok\"'\n", c.memory)
				n := c.want
				fn.Spec.Warm = &n
				r.Warm(fn, code)
				names = append(names, fn.Name)
			}
			if jails, _ := r.warm.counts(); jails != c.wantAll {
				t.Fatalf("the host keeps %d warm jails, want %d", jails, c.wantAll)
			}
			for _, name := range names {
				r.Cool(name)
			}
			if jails, waiting := r.warm.counts(); jails != 0 || len(waiting) != 0 {
				t.Fatalf("after Cool: %d jails, pools %v", jails, waiting)
			}
			left, _ := filepath.Glob(filepath.Join(dir, "run", "warm-*"))
			if len(left) != 0 {
				t.Fatalf("after Cool: %v", left)
			}
		})
	}
}

// TestWarmRun: a job of a function with a warm jail runs in it, with its arguments, and a
// replacement is started; without one (warm: 0) it runs cold.
func TestWarmRun(t *testing.T) {
	r, dir := newJailRunner(t, WarmConfig{PerFunction: 1})
	src := "read -r payload\nprintf '{\"arg\":\"%s\",\"job\":\"%s\"}\\n' \"$ARG_NAME\" \"$JOB_ID\"\n"
	warm, warmCode := bashFunction(t, dir, "warm", src, 0)
	cold, coldCode := bashFunction(t, dir, "cold", src, 0)
	zero := 0
	cold.Spec.Warm = &zero
	r.Warm(warm, warmCode)
	r.Warm(cold, coldCode)
	for i, c := range []struct {
		fn   *functions.Function
		code string
		hits int
	}{{warm, warmCode, 1}, {warm, warmCode, 2}, {cold, coldCode, 0}} {
		if c.fn == warm {
			waitReady(t, r, warm.Name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, _ := r.Run(ctx, c.fn, c.code, &jobtype.Job{ID: fmt.Sprintf("job%d", i), Payload: []byte(`{"name":"Ada"}`)})
		cancel()
		if out.Err != nil {
			t.Fatalf("%d: %v (stderr %s)", i, out.Err, out.StderrTail)
		}
		if want := fmt.Sprintf(`{"arg":"Ada","job":"job%d"}`, i); string(out.Result) != want {
			t.Fatalf("%d: result %s, want %s", i, out.Result, want)
		}
		if got := counterValue(r.warm.m.hits.WithLabelValues(c.fn.Name)); got != float64(c.hits) {
			t.Fatalf("%d: %v hits, want %d", i, got, c.hits)
		}
	}
	if _, waiting := r.warm.counts(); waiting["cold"] != 0 {
		t.Fatalf("warm: 0 keeps %d jails", waiting["cold"])
	}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	c.Write(&m)
	return m.GetCounter().GetValue()
}

// waitReady waits until a jail of function is waiting, started in the background.
func waitReady(t *testing.T, r *Runner, function string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		r.warm.mu.Lock()
		p := r.warm.pools[function]
		ready := p != nil && len(p.ready) > 0
		r.warm.mu.Unlock()
		if ready {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no warm jail of %s within a minute", function)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
