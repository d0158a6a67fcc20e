package egress

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/iotest"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
)

// The attack of issue 37, item 2: a sealed host that echoes what it was sent hands the job the
// real key unless every response from it is scrubbed, in every encoding it may arrive in and in
// every form the proxy wrote the key in. These tests are the red team's requests.

// encodeBody compresses b with a Content-Encoding token, as an upstream would.
func encodeBody(enc string, b []byte) ([]byte, error) {
	var buf bytes.Buffer
	var w io.WriteCloser
	switch enc {
	case "gzip":
		w = gzip.NewWriter(&buf)
	case "deflate": // RFC 9110: "deflate" is the zlib format
		w = zlib.NewWriter(&buf)
	case "br":
		w = brotli.NewWriter(&buf)
	case "zstd":
		zw, err := zstd.NewWriter(&buf)
		if err != nil {
			return nil, err
		}
		w = zw
	default:
		return nil, fmt.Errorf("no encoder for %q", enc)
	}
	if _, err := w.Write(b); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// decodeReceived undoes what Content-Encoding says is still applied to a body the client received.
func decodeReceived(t testing.TB, enc string, b []byte) []byte {
	t.Helper()
	var r io.Reader
	var err error
	switch strings.ToLower(strings.TrimSpace(enc)) {
	case "", "identity":
		return b
	case "gzip":
		r, err = gzip.NewReader(bytes.NewReader(b))
	case "deflate":
		r, err = zlib.NewReader(bytes.NewReader(b))
	case "br":
		r = brotli.NewReader(bytes.NewReader(b))
	case "zstd":
		var d *zstd.Decoder
		d, err = zstd.NewReader(bytes.NewReader(b))
		if err == nil {
			defer d.Close()
			r = d
		}
	default:
		t.Fatalf("the client got Content-Encoding %q, which the test cannot read", enc)
	}
	if err != nil {
		t.Fatalf("decode %s: %v", enc, err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("decode %s: %v", enc, err)
	}
	return out
}

// echoHeaders writes every request header into the body, sorted, one per line: what a debugging
// endpoint or a careless error page does. With enc it compresses the body whatever the request's
// Accept-Encoding said (a server that ignores it); with status, answers that status.
func echoHeaders(enc string, status int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var sb strings.Builder
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range r.Header {
				if !yield(k) {
					return
				}
			}
		}) {
			fmt.Fprintf(&sb, "%s: %s\n", k, strings.Join(r.Header[k], ", "))
		}
		body := []byte(sb.String())
		if enc != "" {
			var err error
			if body, err = encodeBody(enc, body); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Encoding", enc)
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(status)
		w.Write(body)
	})
}

// startSealedUpstream is startSealed with targetName pinned to a server running h.
func startSealedUpstream(t *testing.T, h http.Handler) *sealedFixture {
	t.Helper()
	srv := startServer(t, true, h)
	f := startSealed(t, Policy{Sealed: []Sealed{{Name: "K", Value: realKey, Hosts: []string{targetName}}}})
	f.target = srv
	f.proxyFixture = startProxy(t, staticDNS(nil), nil,
		Policy{Sealed: []Sealed{{Name: "K", Placeholder: f.placeholder, Value: realKey, Hosts: []string{targetName}}}},
		func(o *Options) {
			o.CA, o.RootCAs = f.ca, getCA(t).pool
			o.Resolve = map[string]netip.AddrPort{targetName: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), srv.port)}
		})
	return f
}

// rawClient is the fixture's client without Go's transparent gzip: it sends the Accept-Encoding
// the test sets, as curl --compressed, Python requests and Bun fetch do, and hands over what the
// proxy sent as it was.
func (f *sealedFixture) rawClient() *http.Client {
	c := f.client(false)
	c.Transport.(*http.Transport).DisableCompression = true
	return c
}

// leakForms are the forms of the real key a client could read it back from: itself, its base64
// in each alphabet, and the middle of the base64 of the key behind prefixes of every length
// modulo 3 (as in a Basic credential "user:key"), which is the same whatever the prefix.
func leakForms(value string) []string {
	forms := []string{value}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		forms = append(forms, enc.EncodeToString([]byte(value)))
		for _, prefix := range []string{"a", "ab", "x-access-token:", "user:"} {
			s := enc.EncodeToString([]byte(prefix + value + "!"))
			skip := (len(prefix)*4+2)/3 + 1 // past the characters the prefix touches
			forms = append(forms, s[skip:len(s)-4])
		}
	}
	return forms
}

// assertScrubbed fails if the key, in any form, is in what the client received (its body decoded
// if it is still encoded), and unless want (the placeholder's form) is in the body.
func assertScrubbed(t *testing.T, resp *http.Response, raw []byte, want string) {
	t.Helper()
	body := decodeReceived(t, resp.Header.Get("Content-Encoding"), raw)
	var hdr strings.Builder
	resp.Header.Write(&hdr)
	for _, form := range leakForms(realKey) {
		if bytes.Contains(body, []byte(form)) {
			t.Errorf("the key reached the client in its body as %q:\n%s", form, body)
		}
		if strings.Contains(hdr.String(), form) {
			t.Errorf("the key reached the client in a header as %q:\n%s", form, hdr.String())
		}
	}
	if !bytes.Contains(body, []byte(want)) {
		t.Errorf("the body does not hold %q in place of the key:\n%s", want, body)
	}
}

func (f *sealedFixture) fetch(t *testing.T, c *http.Client, path string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest("GET", "https://"+targetName+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// TestSealedEchoIsScrubbedInEveryEncoding: an upstream that echoes the headers it got, compressed
// whatever the client asked, never gives the job the key.
func TestSealedEchoIsScrubbedInEveryEncoding(t *testing.T) {
	for _, enc := range []string{"gzip", "deflate", "br", "zstd"} {
		t.Run(enc, func(t *testing.T) {
			f := startSealedUpstream(t, echoHeaders(enc, http.StatusOK))
			resp, body := f.fetch(t, f.rawClient(), "/echo", map[string]string{
				"X-Api-Key":       f.placeholder,
				"Accept-Encoding": "gzip, deflate, br, zstd",
			})
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %q", resp.StatusCode, body)
			}
			assertScrubbed(t, resp, body, "X-Api-Key: "+f.placeholder)
		})
	}
}

// TestSealedBasicEchoIsScrubbed: a Basic credential the proxy wrote ("user:key" in base64) and
// echoed back, in a 200 and in a reflected 401, reaches the job as the credential it sent.
func TestSealedBasicEchoIsScrubbed(t *testing.T) {
	for _, c := range []struct {
		name   string
		status int
		enc    string
	}{{"200", http.StatusOK, ""}, {"401 reflected", http.StatusUnauthorized, ""}, {"401 gzip", http.StatusUnauthorized, "gzip"}} {
		t.Run(c.name, func(t *testing.T) {
			f := startSealedUpstream(t, echoHeaders(c.enc, c.status))
			sent := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+f.placeholder))
			resp, body := f.fetch(t, f.rawClient(), "/repo.git/info/refs", map[string]string{
				"Authorization":   sent,
				"Accept-Encoding": "gzip",
			})
			if resp.StatusCode != c.status {
				t.Fatalf("status %d: %q", resp.StatusCode, body)
			}
			assertScrubbed(t, resp, body, "Authorization: "+sent)
		})
	}
}

// TestSealedHostScrubbedWithoutPlaceholder: a request that carries no placeholder still gets a
// scrubbed answer: the upstream stored the key from an earlier request and shows it now.
func TestSealedHostScrubbedWithoutPlaceholder(t *testing.T) {
	var mu sync.Mutex
	var stored []string
	f := startSealedUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.URL.Path == "/store" {
			stored = append(stored, r.Header.Get("X-Api-Key"), r.Header.Get("Authorization"))
			return
		}
		fmt.Fprintf(w, "stored: %s\n", strings.Join(stored, "\n"))
	}))
	c := f.rawClient()
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("git:"+f.placeholder))
	if resp, body := f.fetch(t, c, "/store", map[string]string{"X-Api-Key": f.placeholder, "Authorization": basic}); resp.StatusCode != 200 {
		t.Fatalf("store: %d %q", resp.StatusCode, body)
	}
	resp, body := f.fetch(t, c, "/show", nil)
	if resp.StatusCode != 200 {
		t.Fatalf("show: %d %q", resp.StatusCode, body)
	}
	assertScrubbed(t, resp, body, f.placeholder)
	if !bytes.Contains(body, []byte(basic)) {
		t.Errorf("the stored Basic credential is not the one the job sent (%q):\n%s", basic, body)
	}
}

// TestSealedUnknownEncodingRefused: a body in an encoding the proxy cannot read cannot be
// scrubbed, so it is not passed on: the job gets a 502 that says why.
func TestSealedUnknownEncodingRefused(t *testing.T) {
	f := startSealedUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "x-rot13")
		io.WriteString(w, "key="+r.Header.Get("X-Api-Key"))
	}))
	resp, body := f.fetch(t, f.rawClient(), "/", map[string]string{"X-Api-Key": f.placeholder})
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "x-rot13") ||
		!strings.Contains(resp.Header.Get("Proxy-Status"), "http_response_content_coding") {
		t.Fatalf("got %d %q (Proxy-Status %q); want 502 naming the encoding", resp.StatusCode, body, resp.Header.Get("Proxy-Status"))
	}
	if strings.Contains(string(body), realKey) {
		t.Errorf("the refusal holds the key: %q", body)
	}
}

// TestSealedGzipEventStream: a sealed host answering server-sent events gzip-compressed (flushed
// per event) still streams: each event reaches the client, scrubbed, before the next is sent.
func TestSealedGzipEventStream(t *testing.T) {
	next := make(chan struct{})
	f := startSealedUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		for i := range 3 {
			fmt.Fprintf(zw, "data: event %d key %s\n\n", i, r.Header.Get("X-Api-Key"))
			zw.Flush()
			w.(http.Flusher).Flush()
			select {
			case <-next: // the client read this event: only then the next one
			case <-r.Context().Done():
				return
			}
		}
		zw.Close()
	}))
	for _, h2 := range []bool{false, true} {
		c := f.client(h2)
		c.Transport.(*http.Transport).DisableCompression = true
		req, _ := http.NewRequest("GET", "https://"+targetName+"/stream", nil)
		req.Header.Set("X-Api-Key", f.placeholder)
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body io.Reader = resp.Body
		if resp.Header.Get("Content-Encoding") == "gzip" { // not what the fix does, but readable
			zr, err := gzip.NewReader(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			body = zr
		}
		br := bufio.NewReader(body)
		for i := range 3 {
			line, err := br.ReadString('\n')
			if want := fmt.Sprintf("data: event %d key %s\n", i, f.placeholder); err != nil || line != want {
				t.Fatalf("h2=%v: event %d: %q, %v; want %q", h2, i, line, err, want)
			}
			br.ReadString('\n')
			next <- struct{}{}
		}
		resp.Body.Close()
	}
}

// TestJailCurlCompressedSealed: curl --compressed in a real jail, against a sealed host that
// echoes its request headers gzip-compressed, prints the placeholder and never the key.
func TestJailCurlCompressedSealed(t *testing.T) {
	j := newJail(t)
	srv := startServer(t, true, echoHeaders("gzip", http.StatusOK))
	hostCA, err := LoadCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(j.dataDir, "bundle.pem"), append(append([]byte{}, getCA(t).pem...), hostCA.CertPEM()...), 0o644)
	ph, err := NewPlaceholder()
	if err != nil {
		t.Fatal(err)
	}
	sock := jailProxy(t, Options{CA: hostCA, RootCAs: getCA(t).pool,
		Resolve: map[string]netip.AddrPort{targetName: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), srv.port)}},
		Policy{Allow: []string{targetName}, Sealed: []Sealed{{Name: "K", Placeholder: ph, Value: realKey, Hosts: []string{targetName}}}})
	r := j.run(t, sock, nil, nil, "curl", "-sS", "--fail-with-body", "--compressed", "--max-time", "60",
		"--cacert", jailData+"/bundle.pem", "-H", "X-Api-Key: "+ph,
		"-u", "x-access-token:"+ph, "https://"+targetName+"/echo")
	if r.code != 0 {
		t.Fatalf("curl failed:\n%s", r)
	}
	for _, form := range leakForms(realKey) {
		if strings.Contains(r.stdout, form) || strings.Contains(r.stderr, form) {
			t.Errorf("the key reached the jail as %q:\n%s", form, r)
		}
	}
	if !strings.Contains(r.stdout, "X-Api-Key: "+ph) {
		t.Errorf("curl did not print the placeholder:\n%s", r)
	}
}

// TestScrubAcrossReads: a value split across reads (one byte at a time, as a slow stream
// arrives), in each encoding, raw deflate included, is still scrubbed in every form.
func TestScrubAcrossReads(t *testing.T) {
	ph, err := NewPlaceholder()
	if err != nil {
		t.Fatal(err)
	}
	sc := newScrubber([]Sealed{{Name: "K", Placeholder: ph, Value: realKey, Hosts: []string{targetName}}})
	plain := "key " + realKey + "\nbasic " + base64.StdEncoding.EncodeToString([]byte("user:"+realKey)) +
		"\njson " + base64.URLEncoding.EncodeToString([]byte(`{"k":"`+realKey+`"}`)) + "\nend\n"
	for _, enc := range []string{"identity", "gzip", "deflate", "raw deflate", "br", "zstd"} {
		t.Run(enc, func(t *testing.T) {
			body := []byte(plain)
			switch enc {
			case "identity":
			case "raw deflate":
				var buf bytes.Buffer
				fw, _ := flate.NewWriter(&buf, flate.DefaultCompression)
				fw.Write(body)
				fw.Close()
				body = buf.Bytes()
			default:
				if body, err = encodeBody(enc, body); err != nil {
					t.Fatal(err)
				}
			}
			coding := strings.TrimPrefix(enc, "raw ")
			var r io.ReadCloser = io.NopCloser(iotest.OneByteReader(bytes.NewReader(body)))
			if coding != "identity" {
				r = decodeBody(r, []string{coding})
			}
			out, err := io.ReadAll(&scrubReader{r: r, pairs: sc.pairs()})
			if err != nil {
				t.Fatal(err)
			}
			for _, form := range leakForms(realKey) {
				if bytes.Contains(out, []byte(form)) {
					t.Errorf("%q left in:\n%s", form, out)
				}
			}
			if !bytes.HasPrefix(out, []byte("key "+ph+"\n")) || !bytes.HasSuffix(out, []byte("\nend\n")) {
				t.Errorf("scrubbed body:\n%s", out)
			}
		})
	}
}

// TestSealedUpgradeRefused: a sealed host's switch to another protocol (a WebSocket) would carry
// frames the proxy does not read, so the switch is refused with a 502 that says why.
func TestSealedUpgradeRefused(t *testing.T) {
	f := startSealedUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nkey=" + r.Header.Get("X-Api-Key"))
		brw.Flush()
	}))
	resp, body := f.fetch(t, f.rawClient(), "/ws", map[string]string{
		"X-Api-Key": f.placeholder, "Connection": "Upgrade", "Upgrade": "websocket",
	})
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "WebSocket") ||
		!strings.Contains(resp.Header.Get("Proxy-Status"), "http_upgrade_failed") {
		t.Fatalf("got %d %q (Proxy-Status %q); want 502 naming the protocol switch", resp.StatusCode, body, resp.Header.Get("Proxy-Status"))
	}
	if strings.Contains(string(body), realKey) {
		t.Errorf("the refusal holds the key: %q", body)
	}
}

// TestSealedTrailerIsScrubbed: a trailer, sent after the body, is scrubbed too.
func TestSealedTrailerIsScrubbed(t *testing.T) {
	f := startSealedUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Echo")
		io.WriteString(w, "body\n")
		w.Header().Set("X-Echo", r.Header.Get("X-Api-Key"))
	}))
	for _, h2 := range []bool{false, true} {
		resp, body := f.fetch(t, f.client(h2), "/", map[string]string{"X-Api-Key": f.placeholder})
		if got := resp.Trailer.Get("X-Echo"); resp.StatusCode != 200 || got != f.placeholder {
			t.Errorf("h2=%v: %d %q, trailer X-Echo %q; want the placeholder", h2, resp.StatusCode, body, got)
		}
	}
}
