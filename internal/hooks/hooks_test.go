package hooks

import (
	"context"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap/zaptest"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/secrets"
)

func TestParseSource(t *testing.T) {
	cases := []struct {
		in      string
		want    Source
		wantErr string
	}{
		{"github=hmac:gh-secret", Source{Name: "github", Auth: HMAC, Secret: "gh-secret"}, ""},
		{"ci=bearer:ci-token", Source{Name: "ci", Auth: Bearer, Secret: "ci-token"}, ""},
		{"public=open", Source{Name: "public", Auth: Open}, ""},
		{"github", Source{}, "want <source>="},
		{"git.hub=open", Source{}, "letters, digits"},
		{"github=hmac", Source{}, "needs the name of a secret"},
		{"github=open:x", Source{}, "takes no secret"},
		{"github=basic:x", Source{}, "unknown authentication"},
	}
	for _, c := range cases {
		got, err := ParseSource(c.in)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("ParseSource(%q) error = %v, want %q", c.in, err, c.wantErr)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseSource(%q) = %+v, %v", c.in, got, err)
		}
	}
}

// Bearer and open sources against a real JetStream stream and secret store; the HMAC source is
// covered end to end by the GitHub triage flow.
func TestBearerAndOpen(t *testing.T) {
	log := zaptest.NewLogger(t)
	srv, err := bus.StartServer(bus.ServerConfig{Listen: "127.0.0.1:-1", StoreDir: t.TempDir()}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if _, err := bus.EnsureRunStream(ctx, js, nil, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	rand.Read(key)
	store, err := secrets.Open(ctx, js, key, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Set(ctx, "ci-token", []byte(`"tok-123456"`)); err != nil {
		t.Fatal(err)
	}
	// A subscriber sees what the handler publishes (the stream drops what no consumer wants).
	got := make(chan *nats.Msg, 8)
	sub, _ := nc.ChanSubscribe("webhook.>", got)
	defer sub.Unsubscribe()
	nc.Flush()

	h := New(js, store, []Source{{Name: "ci", Auth: Bearer, Secret: "ci-token"}, {Name: "public", Auth: Open}, {Name: "broken", Auth: Bearer, Secret: "unset"}}, log)
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.SetPathValue("source", strings.TrimPrefix(r.URL.Path, "/hooks/"))
		h.ServeHTTP(w, r)
	}))
	defer web.Close()
	post := func(source, token, idem string) int {
		req, _ := http.NewRequest("POST", web.URL+"/hooks/"+source, strings.NewReader(`{"build":1}`))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if idem != "" {
			req.Header.Set("Idempotency-Key", idem)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		source, token string
		want          int
	}{
		{"ci", "", 401}, {"ci", "wrong", 401}, {"broken", "x", 503}, {"nope", "", 404},
		{"ci", "tok-123456", 202}, {"public", "", 202},
	} {
		if code := post(c.source, c.token, "key-"+c.source); code != c.want {
			t.Fatalf("%s with token %q: %d, want %d", c.source, c.token, code, c.want)
		}
	}
	for _, want := range []string{"webhook.ci", "webhook.public"} {
		select {
		case m := <-got:
			if m.Subject != want || m.Header.Get("Nats-Msg-Id") == "" {
				t.Fatalf("published %s %v, want %s", m.Subject, m.Header, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s not published", want)
		}
	}
	select {
	case m := <-got:
		t.Fatalf("a refused delivery was published: %s", m.Subject)
	default:
	}
}
