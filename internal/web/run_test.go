package web_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/web"
	"github.com/agenthost/host/internal/webauth"
)

// serve starts a web face on h, changed by tweak, and closes it at the test's end.
func serve(t *testing.T, h *hosttest.H, tweak func(*web.Config)) *httptest.Server {
	t.Helper()
	cfg := h.WebConfig()
	if tweak != nil {
		tweak(&cfg)
	}
	srv := httptest.NewServer(web.New(cfg))
	t.Cleanup(srv.Close)
	return srv
}

// POST /run/<fn> answers every status the contract names, on a real NATS with real job records.
func TestHTTPRun(t *testing.T) {
	release := make(chan struct{})
	fake := hosttest.NewRuns().
		On("hello", func(context.Context, *jobtype.Job) *jobtype.Outcome {
			return &jobtype.Outcome{Result: []byte(`{"hi":"there"}`)}
		}).
		On("boom", func(context.Context, *jobtype.Job) *jobtype.Outcome {
			return &jobtype.Outcome{Err: &jobtype.TerminalError{Err: errors.New("bad input: no order")}, ExitCode: 4}
		}).
		On("slow", func(ctx context.Context, _ *jobtype.Job) *jobtype.Outcome {
			select {
			case <-release:
				return &jobtype.Outcome{Result: []byte(`"finally"`)}
			case <-ctx.Done():
				return &jobtype.Outcome{Err: ctx.Err(), ExitCode: -1}
			}
		})
	h := hosttest.NewEngine(t, map[string]string{"hello.sh": "echo\n", "boom.sh": "echo\n", "slow.sh": "echo\n"}, fake)
	srv := serve(t, h, func(c *web.Config) { c.RunMaxBytes = 100 })

	cases := []struct {
		name     string
		path     string
		body     string
		hdr      map[string]string
		want     int
		contains []string
	}{
		{name: "queued", path: "/run/hello", body: `{"name":"Ada"}`, want: 202, contains: []string{`"job_id"`}},
		{name: "empty body is no arguments", path: "/run/hello", want: 202, contains: []string{`"job_id"`}},
		{name: "wait for the result", path: "/run/hello?wait=30s", body: `{}`, want: 200, contains: []string{`{"hi":"there"}`}},
		{name: "failed: the error object", path: "/run/boom?wait=30s", body: `{}`, want: 422, contains: []string{`"function":"boom"`, "bad input: no order", `"job_id"`}},
		{name: "unknown function: the served ones", path: "/run/nope", body: `{}`, want: 404, contains: []string{`\"nope\"`, "boom, hello, slow"}},
		{name: "a name no function can have", path: "/run/No.Such", body: `{}`, want: 404, contains: []string{"hello"}},
		{name: "an array", path: "/run/hello", body: `[1,2]`, want: 400, contains: []string{"JSON object", "an array"}},
		{name: "not JSON", path: "/run/hello", body: `{name:`, want: 400, contains: []string{"not valid JSON"}},
		{name: "over the body limit", path: "/run/hello", body: `{"x":"` + strings.Repeat("a", 200) + `"}`, want: 413, contains: []string{"--run-max-bytes", "max_payload"}},
		{name: "a bad wait", path: "/run/hello?wait=soon", body: `{}`, want: 400, contains: []string{"?wait=soon"}},
		{name: "a wait too long", path: "/run/hello?wait=24h", body: `{}`, want: 400, contains: []string{"at most"}},
		{name: "an Idempotency-Key that cannot be a job id", path: "/run/hello", body: `{}`, hdr: map[string]string{"Idempotency-Key": "a.b>c"}, want: 400, contains: []string{"Idempotency-Key"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body, _ := hosttest.Post(t, srv.URL+c.path, c.body, c.hdr)
			if status != c.want {
				t.Fatalf("status %d, want %d: %s", status, c.want, body)
			}
			for _, s := range c.contains {
				if !strings.Contains(body, s) {
					t.Errorf("body %s lacks %q", body, s)
				}
			}
		})
	}

	t.Run("202 queues a durable job that runs", func(t *testing.T) {
		status, body, hdr := hosttest.Post(t, srv.URL+"/run/hello", `{"n":1}`, nil)
		if status != 202 {
			t.Fatalf("status %d: %s", status, body)
		}
		id := hosttest.Decode[map[string]string](t, []byte(body))["job_id"]
		if id == "" || hdr.Get("Job-Id") != id {
			t.Fatalf("job id %q, header %q", id, hdr.Get("Job-Id"))
		}
		rec, err := h.Store.WaitFinal(t.Context(), id)
		if err != nil || rec.Status != jobtype.Succeeded || rec.Function != "hello" {
			t.Fatalf("record %+v, %v", rec, err)
		}
	})

	t.Run("504 while running, and the job goes on", func(t *testing.T) {
		status, body, _ := hosttest.Post(t, srv.URL+"/run/slow?wait=1s", `{}`, nil)
		if status != 504 {
			t.Fatalf("status %d: %s", status, body)
		}
		got := hosttest.Decode[map[string]string](t, []byte(body))
		if got["job_id"] == "" || !strings.Contains(got["error"], "goes on") {
			t.Fatalf("body %s", body)
		}
		close(release)
		rec, err := h.Store.WaitFinal(t.Context(), got["job_id"])
		if err != nil || rec.Status != jobtype.Succeeded || string(rec.Result) != `"finally"` {
			t.Fatalf("record %+v, %v", rec, err)
		}
	})

	t.Run("Idempotency-Key names the job, once", func(t *testing.T) {
		key := map[string]string{"Idempotency-Key": "order-42"}
		for range 2 {
			status, body, _ := hosttest.Post(t, srv.URL+"/run/hello?wait=30s", `{}`, key)
			if status != 200 || body != `{"hi":"there"}` {
				t.Fatalf("status %d: %s", status, body)
			}
		}
		if n := fake.Count("order-42"); n != 1 {
			t.Fatalf("order-42 ran %d times, want once", n)
		}
		status, body, _ := hosttest.Post(t, srv.URL+"/run/boom", `{}`, key)
		if status != http.StatusConflict || !strings.Contains(body, "already belongs") {
			t.Fatalf("the key reused for another function: %d %s", status, body)
		}
	})
}

// With a token, /run needs it; webhooks and the security headers are unaffected by it.
func TestHTTPRunNeedsTheToken(t *testing.T) {
	const token = "the-token-of-this-test-0123"
	h := hosttest.NewEngine(t, map[string]string{"hello.sh": "echo\n"}, hosttest.NewRuns())
	srv := serve(t, h, func(c *web.Config) { c.Auth = webauth.Config{Token: token, Loopback: true} })
	cases := []struct {
		name string
		hdr  map[string]string
		want int
	}{
		{"no token", nil, 401},
		{"wrong token", map[string]string{"Authorization": "Bearer " + strings.ToUpper(token)}, 401},
		{"token", map[string]string{"Authorization": "Bearer " + token}, 202},
		{"token, cross-site", map[string]string{"Authorization": "Bearer " + token, "Sec-Fetch-Site": "cross-site"}, 403},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body, hdr := hosttest.Post(t, srv.URL+"/run/hello", `{}`, c.hdr)
			if status != c.want {
				t.Fatalf("status %d, want %d: %s", status, c.want, body)
			}
			if csp := hdr.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
				t.Errorf("Content-Security-Policy %q", csp)
			}
			var v map[string]any
			if err := json.Unmarshal([]byte(body), &v); err != nil {
				t.Errorf("body is not JSON: %s", body)
			}
		})
	}
}

// A POST /run that sends its headers and stalls its body is cut off with 408 (the red team held
// hundreds of such requests open); one whose body came in time may wait for its job far longer
// than that deadline.
func TestHTTPRunBodyHasADeadline(t *testing.T) {
	const token = "the-token-of-this-test-0123"
	const bodyTimeout = 200 * time.Millisecond
	release := make(chan struct{})
	fake := hosttest.NewRuns().On("slow", func(ctx context.Context, _ *jobtype.Job) *jobtype.Outcome {
		select {
		case <-release:
			return &jobtype.Outcome{Result: []byte(`"done"`)}
		case <-ctx.Done():
			return &jobtype.Outcome{Err: ctx.Err(), ExitCode: -1}
		}
	})
	h := hosttest.NewEngine(t, map[string]string{"slow.sh": "echo\n"}, fake)
	srv := serve(t, h, func(c *web.Config) { c.Auth = webauth.Config{Token: token, Loopback: true, BodyTimeout: bodyTimeout} })

	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute)) // only a bound for a broken test
	io.WriteString(c, "POST /run/slow HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "+token+"\r\nContent-Length: 100\r\n\r\n{\"a\":")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled POST /run body: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("stalled body: %d, want 408", resp.StatusCode)
	}

	go func() {
		time.Sleep(5 * bodyTimeout) // past the body's deadline, while the request waits
		close(release)
	}()
	status, body, _ := hosttest.Post(t, srv.URL+"/run/slow?wait=1m", `{}`, map[string]string{"Authorization": "Bearer " + token})
	if status != 200 || body != `"done"` {
		t.Fatalf("a ?wait that outlasts the body's deadline: %d %s", status, body)
	}
}
