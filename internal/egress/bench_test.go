package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"testing"
	"time"
)

// BenchmarkSealedVsTunnel measures what terminating TLS costs a request: the same HTTPS GET to
// a local TLS server through one proxy, to a host reached as a plain tunnel and to a host with a
// sealed secret (TLS terminated, the header substituted, a second TLS connection upstream),
// alternated request by request so that both see the same machine. "reused" keeps the client's
// connection (an SDK's pool); "new" opens one per request (curl in a loop), which pays for both
// handshakes. It reports p50 and p99 of each, in microseconds, and the added p50.
//
//	go test -run '^$' -bench SealedVsTunnel -benchtime 1000x ./internal/egress/
func BenchmarkSealedVsTunnel(b *testing.B) {
	srv := startServer(b, true, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	hostCA, err := LoadCA(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	ph, _ := NewPlaceholder()
	local := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), srv.port)
	sock := socketPath(b)
	p := New(Options{CA: hostCA, RootCAs: getCA(b).pool, Resolve: map[string]netip.AddrPort{targetName: local, otherName: local}})
	c, err := p.Listen(context.Background(), sock, -1, -1, Policy{
		Allow:  []string{targetName, otherName},
		Sealed: []Sealed{{Name: "K", Placeholder: ph, Value: "sk-real", Hosts: []string{targetName}}},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(hostCA.CertPEM())
	roots.AppendCertsFromPEM(getCA(b).pem)
	client := func(keepAlive bool) *http.Client {
		return &http.Client{Transport: &http.Transport{
			Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "proxy.invalid"}),
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", sock)
			},
			TLSClientConfig:   &tls.Config{RootCAs: roots},
			DisableKeepAlives: !keepAlive,
		}}
	}
	for _, mode := range []struct {
		name      string
		keepAlive bool
	}{{"reused", true}, {"new", false}} {
		b.Run(mode.name, func(b *testing.B) {
			tunnelC, sealedC := client(mode.keepAlive), client(mode.keepAlive)
			get := func(c *http.Client, host string) time.Duration {
				req, _ := http.NewRequest("GET", "https://"+host+"/", nil)
				req.Header.Set("X-Api-Key", ph)
				start := time.Now()
				resp, err := c.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return time.Since(start)
			}
			get(tunnelC, otherName) // connections and leaves made before timing
			get(sealedC, targetName)
			var tunnel, sealed []time.Duration
			b.ResetTimer()
			for range b.N {
				tunnel = append(tunnel, get(tunnelC, otherName))
				sealed = append(sealed, get(sealedC, targetName))
			}
			b.StopTimer()
			tp50, tp99 := quantiles(tunnel)
			sp50, sp99 := quantiles(sealed)
			b.ReportMetric(float64(tp50.Microseconds()), "tunnel-p50-µs")
			b.ReportMetric(float64(tp99.Microseconds()), "tunnel-p99-µs")
			b.ReportMetric(float64(sp50.Microseconds()), "sealed-p50-µs")
			b.ReportMetric(float64(sp99.Microseconds()), "sealed-p99-µs")
			b.ReportMetric(float64((sp50 - tp50).Microseconds()), "added-p50-µs")
			b.Log(fmt.Sprintf("%s: %d requests each: tunnel p50 %s p99 %s; sealed p50 %s p99 %s; added p50 %s",
				mode.name, len(tunnel), tp50, tp99, sp50, sp99, sp50-tp50))
		})
	}
}

func quantiles(ds []time.Duration) (p50, p99 time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)*99/100]
}
