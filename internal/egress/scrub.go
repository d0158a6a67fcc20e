package egress

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
)

// Scrubbing: a sealed key never comes back to the jail, in any encoding (issue 37, item 2).
//
// A host a key is sealed for has been sent the key, so anything it answers may hold it: an
// error page or a debugging endpoint that echoes the request's headers, a 401 that reflects
// the credential, a stored value shown again later. So every response from such a host is
// scrubbed, whether or not that request carried a placeholder, of every secret the session
// seals (not only those sealed for that host: scrubbing one more value costs a pass over the
// bytes, and a value the job never sent there cannot be told from one it did).
//
// Compression would hide the key from a byte search, so the proxy does two things, neither
// enough alone: it asks a sealed host for Accept-Encoding: identity, so that a server that
// honours it sends bytes the proxy can scrub as they stream, at no decoding cost; and it
// decodes whatever encoding still comes back (gzip, deflate, br, zstd: a server may ignore the
// request's header, and a cached or pre-compressed response does), scrubs the decoded bytes and
// serves them decoded, without Content-Encoding or Content-Length. A coding it cannot decode
// it cannot scrub, so that response is refused with a 502 rather than passed on.
//
// The forms scrubbed are those the key can be read back in from what the proxy itself wrote:
// the value; its JSON- and URL-escaped forms (what an echo in a JSON or form body shows); its
// base64, and the exact Basic credentials the proxy wrote ("user:value") in base64, each
// replaced by the placeholder's form, so the job sees what it sent; and, for any other text
// that holds the value and was base64-encoded (a credential the proxy did not record, a JSON
// document), the value's base64 at each of the 3 byte alignments less the characters it shares
// with its neighbours (base64Cores), replaced by the placeholder's at the same alignment. What
// the upstream does to the value itself (hash it, reverse it, encrypt it, cut it into pieces) is
// not found: the key was given to that host, and it can always misuse it.

// scrubPair replaces a real value's form by its placeholder's in what an upstream sends back.
type scrubPair struct{ value, placeholder []byte }

// maxBasicCreds bounds the Basic credentials a session remembers exactly: a job choosing a new
// user name per request must not grow the proxy's memory. Past it, a credential echoed back is
// still scrubbed, by the base64 cores, only less tidily (a character or two garbled at its ends).
const maxBasicCreds = 64

// minScrubCore is the shortest base64 core scrubbed: as secrets.minBase64Core, so that the core
// of a short value cannot match a response's ordinary text.
const minScrubCore = 8

// scrubber holds the forms a session scrubs from what its sealed hosts send back. It is shared
// by the session's requests: a Basic credential recorded for one request is scrubbed from every
// later response (an upstream that stores it and shows it again).
type scrubber struct {
	base []scrubPair // the secrets' own forms; fixed

	mu    sync.Mutex
	basic []scrubPair // exact Basic credentials the proxy wrote, in each base64 alphabet
	seen  map[string]bool
}

func newScrubber(secrets []Sealed) *scrubber {
	sc := &scrubber{seen: map[string]bool{}}
	var whole, cores []scrubPair
	for _, sec := range secrets {
		v, ph := []byte(sec.Value), []byte(sec.Placeholder)
		whole = append(whole, base64Pairs(v, ph)...)
		sc.base = append(sc.base, scrubPair{v, ph})
		// The placeholder ("sealed-" and hex) reads the same in every escaping.
		if j, err := json.Marshal(sec.Value); err == nil && string(j[1:len(j)-1]) != sec.Value {
			sc.base = append(sc.base, scrubPair{j[1 : len(j)-1], ph})
		}
		for _, esc := range []string{url.QueryEscape(sec.Value), url.PathEscape(sec.Value)} {
			if esc != sec.Value {
				sc.base = append(sc.base, scrubPair{[]byte(esc), ph})
			}
		}
		for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
			vc, pc := base64Cores(enc, v), base64Cores(enc, ph)
			for k := range vc {
				if vc[k] != "" && len(vc[k]) >= minScrubCore {
					cores = append(cores, scrubPair{[]byte(vc[k]), []byte(pc[k])})
				}
			}
		}
	}
	// Whole forms before the cores that match inside them: the job then reads back exactly the
	// placeholder's base64, not one with garbled ends.
	sc.base = dedupPairs(append(append(whole, sc.base...), cores...))
	return sc
}

// base64Pairs are v's base64 in each alphabet, padded first (the unpadded form is a prefix of
// it), each with ph's in the same one.
func base64Pairs(v, ph []byte) []scrubPair {
	var out []scrubPair
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		out = append(out, scrubPair{[]byte(enc.EncodeToString(v)), []byte(enc.EncodeToString(ph))})
	}
	return out
}

func dedupPairs(ps []scrubPair) []scrubPair {
	seen := map[string]bool{}
	out := ps[:0]
	for _, p := range ps {
		if len(p.value) == 0 || seen[string(p.value)] {
			continue
		}
		seen[string(p.value)] = true
		out = append(out, p)
	}
	return out
}

// base64Cores returns the characters of enc's encoding of v that depend on v alone when v
// starts 0, 1 or 2 bytes into the encoded text (index k): base64 maps each 3 bytes to 4
// characters, so the encoding of any text holding v holds one of them, whatever its
// neighbours, while the first and last characters of v's part also carry their bits. A core
// shorter than minScrubCore is "" (callers skip it). enc is unpadded. This is
// secrets.base64Cores, which redacts the same forms from the job's logs and results; egress
// keeps its own copy rather than import the secret store.
func base64Cores(enc *base64.Encoding, v []byte) [3]string {
	var out [3]string
	for k := range 3 {
		buf := make([]byte, k+len(v)+3)
		copy(buf[k:], v)
		text := enc.EncodeToString(buf)
		// Character j holds bits [6j, 6j+6) of the text; v holds bits [8k, 8(k+len(v))).
		first, last := (8*k+5)/6, 8*(k+len(v))/6
		if last-first >= minScrubCore {
			out[k] = text[first:last]
		}
	}
	return out
}

// basicCred is a Basic credential the proxy substituted: as the job sent it (with the
// placeholder) and as the proxy wrote it (with the value), both decoded ("user:password").
type basicCred struct{ sent, written string }

// record remembers the Basic credentials the proxy wrote, to scrub them exactly.
func (sc *scrubber) record(creds []basicCred) {
	if len(creds) == 0 {
		return
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for _, c := range creds {
		if sc.seen[c.written] || len(sc.seen) >= maxBasicCreds {
			continue
		}
		sc.seen[c.written] = true
		sc.basic = append(sc.basic, base64Pairs([]byte(c.written), []byte(c.sent))...)
	}
}

// pairs are the forms to scrub, most specific first: a later, shorter form must not cut into
// an earlier, whole one.
func (sc *scrubber) pairs() []scrubPair {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return append(append(make([]scrubPair, 0, len(sc.basic)+len(sc.base)), sc.basic...), sc.base...)
}

func scrubHeader(h http.Header, pairs []scrubPair) {
	for _, vals := range h {
		for i, v := range vals {
			for _, p := range pairs {
				v = strings.ReplaceAll(v, string(p.value), string(p.placeholder))
			}
			vals[i] = v
		}
	}
}

// errUnscrubbable is a response the proxy cannot scrub, so does not pass on: a content coding
// it cannot decode, or a protocol switch (WebSocket) whose frames it does not read.
type errUnscrubbable struct {
	coding     string // the content coding; "" for an upgrade
	proxyError string // RFC 9209 Proxy-Status error type
	msg        string
}

func (e *errUnscrubbable) Error() string { return e.msg }

func undecodable(coding string) *errUnscrubbable {
	return &errUnscrubbable{coding: coding, proxyError: "http_response_content_coding", msg: fmt.Sprintf(
		"the response is in Content-Encoding %q, which the proxy cannot decode, so it cannot remove a "+
			"sealed key from it and did not pass it on; the proxy asked for identity and reads gzip, "+
			"deflate, br and zstd: have the host answer in one of those", coding)}
}

var errUpgrade = &errUnscrubbable{proxyError: "http_upgrade_failed", msg: "the host switched protocols " +
	"(WebSocket), whose frames the proxy does not read, so it cannot remove a sealed key from them and " +
	"refused the switch; reach a sealed host over plain HTTP requests, or do not seal a key for it"}

// scrubResponse makes resp, from a sealed host, safe to hand the job: its content codings
// undone and every form of every sealed value replaced, in the headers and as the body streams.
func (sc *scrubber) scrubResponse(resp *http.Response) error {
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return errUpgrade
	}
	pairs := sc.pairs()
	scrubHeader(resp.Header, pairs)
	codings, err := contentCodings(resp.Header.Values("Content-Encoding"))
	if err != nil {
		return err
	}
	body := resp.Body
	if len(codings) > 0 {
		body = decodeBody(body, codings)
		resp.Header.Del("Content-Encoding")
	}
	resp.Body = &scrubReader{r: body, pairs: pairs, trailer: resp.Trailer}
	// A placeholder is not as long as its value, nor a decoded body as the encoded one.
	resp.ContentLength = -1
	resp.Header.Del("Content-Length")
	return nil
}

// contentCodings parses Content-Encoding into the codings to undo, in the order they were
// applied; an unknown one is an *errUnscrubbable.
func contentCodings(vals []string) ([]string, error) {
	var out []string
	for _, v := range vals {
		for _, c := range strings.Split(v, ",") {
			c = strings.ToLower(strings.TrimSpace(c))
			switch c {
			case "", "identity":
			case "gzip", "x-gzip", "deflate", "br", "zstd":
				out = append(out, c)
			default:
				return nil, undecodable(c)
			}
		}
	}
	return out, nil
}

// decodeBody undoes codings (applied in that order) on body as it is read. The decoders start
// at the first Read, not here: a gzip header is read from the upstream, and the job should get
// the response's headers without waiting for its first bytes (and a bodiless 204 or HEAD
// response has none to read).
func decodeBody(body io.ReadCloser, codings []string) io.ReadCloser {
	d := &decoded{body: body}
	d.open = func() (io.Reader, error) {
		var r io.Reader = body
		for i := len(codings) - 1; i >= 0; i-- {
			next, err := d.decoder(codings[i], r)
			if err != nil {
				return nil, fmt.Errorf("egress: decode the %s response of a sealed host: %w", codings[i], err)
			}
			r = next
		}
		return r, nil
	}
	return d
}

// decoded is a body read through its decoders, opened at the first Read.
type decoded struct {
	body    io.ReadCloser
	open    func() (io.Reader, error)
	r       io.Reader
	err     error
	closers []func()
}

func (d *decoded) decoder(coding string, r io.Reader) (io.Reader, error) {
	switch coding {
	case "gzip", "x-gzip":
		return gzip.NewReader(r)
	case "deflate":
		// RFC 9110's deflate is the zlib format, but servers have long sent raw deflate too:
		// a zlib header (compression method 8, check bits) tells them apart.
		br := bufio.NewReader(r)
		h, err := br.Peek(2)
		if err != nil {
			return nil, err
		}
		if h[0]&0x0f == 8 && (uint16(h[0])<<8|uint16(h[1]))%31 == 0 {
			return zlib.NewReader(br)
		}
		return flate.NewReader(br), nil
	case "br":
		return brotli.NewReader(r), nil
	case "zstd":
		// One goroutine, and a window no larger than HTTP's zstd asks decoders to support
		// (RFC 8878: 8 MB) with room to spare, so a hostile frame cannot claim the host's memory.
		zd, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(16<<20))
		if err != nil {
			return nil, err
		}
		d.closers = append(d.closers, zd.Close)
		return zd, nil
	}
	return nil, undecodable(coding) // contentCodings let only the above through
}

func (d *decoded) Read(p []byte) (int, error) {
	if d.r == nil && d.err == nil {
		d.r, d.err = d.open()
		if errors.Is(d.err, io.EOF) { // no body at all: nothing was encoded
			d.err = io.EOF
		}
	}
	if d.err != nil {
		return 0, d.err
	}
	return d.r.Read(p)
}

func (d *decoded) Close() error {
	for _, c := range d.closers {
		c()
	}
	return d.body.Close()
}

// scrubReader replaces values as a body streams by. It holds back only a tail that could be
// the start of a value, so a streamed event is not delayed unless it ends in one.
type scrubReader struct {
	r       io.ReadCloser
	pairs   []scrubPair
	trailer http.Header // the response's trailers, filled in once the body is read; scrubbed at Close
	chunk   []byte      // read buffer
	buf     []byte      // scrubbed, not yet returned
	held    []byte      // a possible start of a value, waiting for more
	err     error
}

func (s *scrubReader) Read(p []byte) (int, error) {
	for len(s.buf) == 0 {
		if s.err != nil {
			if len(s.held) > 0 {
				s.buf, s.held = s.held, nil
				break
			}
			return 0, s.err
		}
		if s.chunk == nil {
			s.chunk = make([]byte, 32<<10)
		}
		n, err := s.r.Read(s.chunk)
		s.err = err
		data := append(s.held, s.chunk[:n]...)
		for _, pr := range s.pairs {
			if bytes.Contains(data, pr.value) { // ReplaceAll copies even when nothing matches
				data = bytes.ReplaceAll(data, pr.value, pr.placeholder)
			}
		}
		keep := 0
		if s.err == nil {
			keep = s.partialTail(data)
		}
		s.buf, s.held = data[:len(data)-keep], append([]byte(nil), data[len(data)-keep:]...)
	}
	n := copy(p, s.buf)
	s.buf = s.buf[n:]
	return n, nil
}

// partialTail is the length of the longest end of data that is a proper start of a value.
func (s *scrubReader) partialTail(data []byte) int {
	longest := 0
	for _, pr := range s.pairs {
		for k := min(len(pr.value)-1, len(data)); k > longest; k-- {
			if bytes.HasPrefix(pr.value, data[len(data)-k:]) {
				longest = k
				break
			}
		}
	}
	return longest
}

// Close closes the body, then scrubs the trailers: ReverseProxy closes the body before it copies
// them, as that is when HTTP/1.1 has filled them in.
func (s *scrubReader) Close() error {
	err := s.r.Close()
	scrubHeader(s.trailer, s.pairs)
	return err
}
