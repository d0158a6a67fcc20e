package mcp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/host/internal/bench"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// BenchmarkToolCall measures an MCP tools/call of the jailed bash no-op side by side with POST
// /run?wait and agent.call of the same function, in one run on one host: b.N calls of each
// taken in turns (each followed, outside its time, by the wait for the warm jail it used to be
// replaced), then b.N of each over 2 callers for the rate. Run it with a count:
//
//	go test -run '^$' -bench ToolCall -benchtime 300x ./internal/mcp/
func BenchmarkToolCall(b *testing.B) {
	h := hosttest.New(b, map[string]string{"noop.sh": "# sandbox\n# tool: Does nothing\ntrue\n"})
	srv := serve(b, h, nil)
	ctx := context.Background()
	cs := connect(b, srv, nil)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}

	calls := []struct {
		name string
		fn   func() error
	}{
		{"agent.call", func() error {
			reply, err := h.NC.RequestWithContext(ctx, bus.CallSubject("noop"), []byte("{}"))
			if err == nil && reply.Header.Get(bus.HeaderJobStatus) != "succeeded" {
				err = fmt.Errorf("agent.call: %s", reply.Data)
			}
			return err
		}},
		{"POST /run?wait", func() error {
			req, _ := http.NewRequest("POST", srv.URL+"/run/noop?wait=30s", strings.NewReader("{}"))
			req.Header.Set("Authorization", "Bearer "+testToken)
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("POST /run: %d %s", resp.StatusCode, body)
			}
			return nil
		}},
		{"MCP tools/call", func() error {
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "noop"})
			if err == nil && res.IsError {
				err = fmt.Errorf("tools/call: %s", res.Content[0].(*sdk.TextContent).Text)
			}
			return err
		}},
	}
	settle := func() {
		if err := bench.WaitWarmJail(h.Metrics, "noop", 30*time.Second); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range calls { // connections, consumers and sessions set up outside the numbers
		if err := c.fn(); err != nil {
			b.Fatal(err)
		}
		settle()
	}
	n := b.N
	lats := make([][]time.Duration, len(calls))
	b.ResetTimer()
	for range n {
		for i, c := range calls {
			t := time.Now()
			if err := c.fn(); err != nil {
				b.Fatal(err)
			}
			lats[i] = append(lats[i], time.Since(t))
			settle()
		}
	}
	rates := make([]float64, len(calls))
	for i, c := range calls {
		var left atomic.Int64
		left.Store(int64(n))
		var wg sync.WaitGroup
		start := time.Now()
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for left.Add(-1) >= 0 {
					if err := c.fn(); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		rates[i] = float64(n) / time.Since(start).Seconds()
		settle()
	}
	b.StopTimer()
	var report strings.Builder
	fmt.Fprintf(&report, "\n%-16s %6s %10s %10s %12s %14s\n", "call of noop", "runs", "p50", "p99", "rate @2", "p50 - agent.call")
	var base time.Duration
	for i, c := range calls {
		slices.Sort(lats[i])
		p50, p99 := lats[i][n/2], lats[i][min(n-1, n*99/100)]
		if i == 0 {
			base = p50
		}
		fmt.Fprintf(&report, "%-16s %6d %10s %10s %10.1f/s %14s\n", c.name, n, p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond), rates[i], (p50 - base).Round(10*time.Microsecond))
		unit := strings.NewReplacer(" ", "", "/", "", "?", "", ".", "").Replace(c.name)
		b.ReportMetric(float64(p50.Microseconds())/1000, unit+"-p50-ms")
		b.ReportMetric(rates[i], unit+"-rate2/s")
	}
	b.Log(report.String())
}
