package hooks

import (
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap/zaptest"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/secrets"
	"github.com/agenthost/host/internal/testkit/natstest"
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
		{"github=hmac", Source{}, "needs the name of a webhook key"},
		{"github=open:x", Source{}, "takes no key"},
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
	nc, js := natstest.Start(t)
	ctx := context.Background()
	if _, err := bus.EnsureRunStream(ctx, js, nil, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	rand.Read(key)
	store, err := secrets.OpenHookKeys(ctx, js, key, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Set(ctx, "ci-token", []byte(`"tok-123456"`)); err != nil {
		t.Fatal(err)
	}
	// The contract's way: `host secrets set legacy-token`, among the function secrets.
	fstore, err := secrets.Open(ctx, js, key, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := fstore.Set(ctx, "legacy-token", []byte(`"legacy-123456"`)); err != nil {
		t.Fatal(err)
	}
	// A subscriber sees what the handler publishes (the stream drops what no consumer wants).
	got := make(chan *nats.Msg, 8)
	sub, _ := nc.ChanSubscribe("webhook.>", got)
	defer sub.Unsubscribe()
	nc.Flush()

	h := New(js, store, log, Config{Sources: []Source{{Name: "ci", Auth: Bearer, Secret: "ci-token"}, {Name: "public", Auth: Open},
		{Name: "broken", Auth: Bearer, Secret: "unset"}, {Name: "legacy", Auth: Bearer, Secret: "legacy-token"}}, FunctionSecrets: fstore})
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
		{"ci", "tok-123456", 202}, {"public", "", 202}, {"legacy", "legacy-123456", 202},
	} {
		if code := post(c.source, c.token, "key-"+c.source); code != c.want {
			t.Fatalf("%s with token %q: %d, want %d", c.source, c.token, code, c.want)
		}
	}
	for _, want := range []string{"webhook.ci", "webhook.public", "webhook.legacy"} {
		select {
		case m := <-got:
			if m.Subject != want || m.Header.Get(bus.HeaderMsgID) == "" {
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

	// The legacy key was moved out of the function secrets, where `$secret:` could reach it.
	if _, err := fstore.Get(ctx, "legacy-token"); !errors.Is(err, secrets.ErrNotFound) {
		t.Fatalf("the webhook key is still among the function secrets: %v", err)
	}
	if v, err := store.Get(ctx, "legacy-token"); err != nil || string(v) != `"legacy-123456"` {
		t.Fatalf("the webhook key was not moved: %s %v", v, err)
	}
	// Rotated the contract's way: the new value wins at the next delivery, the old one is refused.
	if err := fstore.Set(ctx, "legacy-token", []byte(`"legacy-rotated-789"`)); err != nil {
		t.Fatal(err)
	}
	if code := post("legacy", "legacy-123456", "r1"); code != 401 {
		t.Fatalf("old key after rotation: %d", code)
	}
	if code := post("legacy", "legacy-rotated-789", "r2"); code != 202 {
		t.Fatalf("rotated key: %d", code)
	}
	// A source whose key exists only among the function secrets of another name is not
	// satisfied by a function secret of the same name unless it is moved: a host without
	// Config.FunctionSecrets only reads the webhook key store.
	if err := fstore.Set(ctx, "unset", []byte(`"only-a-function-secret"`)); err != nil {
		t.Fatal(err)
	}
	strict := New(js, store, log, Config{Sources: []Source{{Name: "broken", Auth: Bearer, Secret: "unset"}}})
	req := httptest.NewRequest("POST", "/hooks/broken", strings.NewReader("{}"))
	req.SetPathValue("source", "broken")
	req.Header.Set("Authorization", "Bearer only-a-function-secret")
	rec := httptest.NewRecorder()
	strict.ServeHTTP(rec, req)
	if rec.Code != 503 {
		t.Fatalf("a function secret opened a webhook source: %d %s", rec.Code, rec.Body)
	}
}
