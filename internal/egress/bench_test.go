package egress

import (
	"bytes"
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
	"strings"
	"testing"
	"time"
)

// BenchmarkSealedVsTunnel measures what terminating TLS costs a request: the same HTTPS GET to
// a local TLS server through one proxy, to a host reached as a plain tunnel and to a host with a
// sealed secret (TLS terminated, the header substituted, a second TLS connection upstream),
// alternated request by request so that both see the same machine. "reused" keeps the client's
// connection (an SDK's pool); "new" opens one per request (curl in a loop), which pays for both
// handshakes. "gzip" (kept connections) is an upstream that answers a 16 KiB body holding the
// key gzip-compressed whatever it is asked (issue 37): through the tunnel the client decodes
// it; from the sealed host the proxy decodes it, scrubs it and serves it decoded. "page" is the
// same body uncompressed, scrubbed as it streams: the difference is the decoding's. It reports
// p50 and p99 of each, in microseconds, and the added p50 and p99.
//
//	go test -run '^$' -bench SealedVsTunnel -benchtime 1000x ./internal/egress/
func BenchmarkSealedVsTunnel(b *testing.B) {
	const value = "sk-real-0123456789abcdef"
	var page bytes.Buffer
	for i := 0; page.Len() < 16<<10; i++ {
		fmt.Fprintf(&page, `{"i":%d,"text":"a line of a JSON answer, as an API sends","echo":"%s"}`+"\n", i, value)
	}
	gz, err := encodeBody("gzip", page.Bytes())
	if err != nil {
		b.Fatal(err)
	}
	srv := startServer(b, true, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/gzip":
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(gz)
			return
		case "/page":
			w.Write(page.Bytes())
			return
		}
		io.WriteString(w, "ok")
	}))
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
		Sealed: []Sealed{{Name: "K", Placeholder: ph, Value: value, Hosts: []string{targetName}}},
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
		name, path string
		keepAlive  bool
	}{{"reused", "/", true}, {"new", "/", false}, {"page", "/page", true}, {"gzip", "/gzip", true}} {
		b.Run(mode.name, func(b *testing.B) {
			tunnelC, sealedC := client(mode.keepAlive), client(mode.keepAlive)
			get := func(c *http.Client, host string) time.Duration {
				req, _ := http.NewRequest("GET", "https://"+host+mode.path, nil)
				req.Header.Set("X-Api-Key", ph)
				start := time.Now()
				resp, err := c.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if mode.path != "/" && n != int64(page.Len())-int64(strings.Count(page.String(), value)*(len(value)-len(ph))) && host == targetName {
					b.Fatalf("the sealed host's body is %d bytes; want the page decoded with the key scrubbed", n)
				}
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
			b.ReportMetric(float64((sp99 - tp99).Microseconds()), "added-p99-µs")
			b.Log(fmt.Sprintf("%s: %d requests each: tunnel p50 %s p99 %s; sealed p50 %s p99 %s; added p50 %s p99 %s",
				mode.name, len(tunnel), tp50, tp99, sp50, sp99, sp50-tp50, sp99-tp99))
		})
	}
}

func quantiles(ds []time.Duration) (p50, p99 time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)*99/100]
}
