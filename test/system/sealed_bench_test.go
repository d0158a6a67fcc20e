package system_test

import (
	"crypto/tls"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/egress"
	"github.com/agenthost/host/internal/testkit/anthropictest"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/testkit/llmtest"
)

// pinUnderHostCA is pinAPI with the API's certificate signed by the host's own CA, made ahead
// in the host's data dir: the jail trusts it, so a function without a sealed secret (a plain
// tunnel, the jail's client checking the certificate itself) reaches it too.
func pinUnderHostCA(b *testing.B, api interface {
	ServeTLS(tls.Certificate) (netip.AddrPort, error)
}, name string) func(*app.Config) {
	return func(c *app.Config) {
		dir := filepath.Join(c.DataDir, "egress-ca")
		if _, err := egress.LoadCA(dir); err != nil {
			b.Fatal(err)
		}
		ca, err := tls.LoadX509KeyPair(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"))
		if err != nil {
			b.Fatal(err)
		}
		cert, err := llmtest.Issue(ca, name)
		if err != nil {
			b.Fatal(err)
		}
		addr, err := api.ServeTLS(cert)
		if err != nil {
			b.Fatal(err)
		}
		c.EgressCAFiles = []string{filepath.Join(dir, "ca.pem")}
		c.EgressResolve = map[string]netip.AddrPort{name: addr}
	}
}

// BenchmarkClaudeTurnSealedVsPlain runs the same Claude Code turn (claude.ts, the real CLI, in
// the jail, against a local TLS server that speaks the Messages API under api.anthropic.com)
// with the key sealed (the proxy terminates TLS and substitutes it) and with the key itself as
// the argument through a plain tunnel, alternated turn by turn, and reports each one's p50.
//
//	go test -run '^$' -bench ClaudeTurnSealedVsPlain -benchtime 10x ./internal/host/
func BenchmarkClaudeTurnSealedVsPlain(b *testing.B) {
	if _, err := exec.LookPath("/usr/bin/claude"); err != nil {
		b.Skip("SKIPPED LOUDLY: Claude Code is not installed at /usr/bin/claude; scripts/setup installs it")
	}
	api, err := anthropictest.Start(nil)
	if err != nil {
		b.Fatal(err)
	}
	defer api.Close()
	src, err := os.ReadFile("../../functions/claude.ts")
	if err != nil {
		b.Fatal(err)
	}
	sealed := strings.Replace(string(src), "// volume: claude .claude\n",
		"// volume: claude .claude\n// env: CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1\n", 1)
	plain := strings.Replace(sealed, "// env: ANTHROPIC_API_KEY=$sealed:anthropic.apiKey@api.anthropic.com\n", "", 1)
	h := hosttest.New(b, map[string]string{"claude.ts": sealed, "plain.ts": plain}, pinUnderHostCA(b, api, "api.anthropic.com"))
	h.SetSecret("anthropic", `{"apiKey":"`+realKey+`"}`)
	turn := func(fn, payload string) time.Duration {
		start := time.Now()
		out := hosttest.Decode[map[string]any](b, h.Call(fn, payload).Data)
		if r, _ := out["response"].(string); !strings.Contains(r, "You said:") {
			b.Fatalf("%s: %v", fn, out)
		}
		return time.Since(start)
	}
	turn("claude", `{}`) // packages installed, jails warm
	turn("plain", `{"anthropic":"$secret:anthropic"}`)
	var s, p []time.Duration
	b.ResetTimer()
	for range b.N {
		s = append(s, turn("claude", `{}`))
		p = append(p, turn("plain", `{"anthropic":"$secret:anthropic"}`))
	}
	b.StopTimer()
	slices.Sort(s)
	slices.Sort(p)
	b.ReportMetric(float64(s[len(s)/2].Milliseconds()), "sealed-p50-ms")
	b.ReportMetric(float64(p[len(p)/2].Milliseconds()), "plain-p50-ms")
	b.Logf("%d turns each: sealed %v, plain %v", b.N, s, p)
}
