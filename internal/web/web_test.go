package web_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/host/internal/testkit/hosttest"
	"github.com/agenthost/host/internal/web"
)

// get sends a GET to a web face and returns the status and the body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The routes beside /run, on a real engine: /healthz follows it into its drain, /metrics shows
// its series, and /hooks reaches a hook handler only when the face has one.
func TestFace(t *testing.T) {
	h := hosttest.NewEngine(t, map[string]string{"hello.sh": "echo\n"}, hosttest.NewRuns())
	hooked := make(chan string, 1)
	plain := serve(t, h, nil)
	hooks := serve(t, h, func(c *web.Config) {
		c.Hooks = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hooked <- r.PathValue("source")
			w.WriteHeader(http.StatusAccepted)
		})
	})

	if status, body := get(t, plain.URL+"/healthz"); status != 200 || body != `{"status":"ok"}`+"\n" {
		t.Fatalf("/healthz of a ready host: %d %s", status, body)
	}
	if status, body := get(t, plain.URL+"/metrics"); status != 200 || !strings.Contains(body, "host_functions_loaded 1") {
		t.Fatalf("/metrics: %d, want the engine's host_functions_loaded 1 in:\n%s", status, body)
	}
	if status, body, _ := hosttest.Post(t, plain.URL+"/hooks/github", `{}`, nil); status != 404 {
		t.Fatalf("/hooks without a hook handler: %d %s, want 404", status, body)
	}
	if status, body, _ := hosttest.Post(t, hooks.URL+"/hooks/github", `{}`, nil); status != 202 || <-hooked != "github" {
		t.Fatalf("/hooks with a hook handler: %d %s, want it reached for github", status, body)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h.Host.Shutdown(ctx)
	if status, body := get(t, plain.URL+"/healthz"); status != 503 || !strings.Contains(body, `"draining"`) {
		t.Fatalf("/healthz of a draining host: %d %s, want 503 draining", status, body)
	}
}
