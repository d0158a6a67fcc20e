package hooks

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/agenthost/host/internal/testkit/natstest"
)

func TestNewSource(t *testing.T) {
	for _, c := range []struct {
		name, auth, key string
		wantErr         string
	}{
		{"gh", "hmac", "", "hmac needs --key"},
		{"ci", "bearer", "", "bearer needs --key"},
		{"gh", "open", "k1", "open takes no --key"},
		{"gh", "basic", "k1", `unknown authentication "basic"`},
		{"g.h", "open", "", "a name is 1 to 64 letters"},
		{strings.Repeat("a", 65), "open", "", "a name is 1 to 64 letters"},
		{"gh", "hmac", "..bad", "invalid secret name"},
		{"gh", "hmac", "gh-key", ""},
		{"public", "open", "", ""},
	} {
		src, err := NewSource(c.name, Auth(c.auth), c.key)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("NewSource(%q, %q, %q) = %v, want %q", c.name, c.auth, c.key, err, c.wantErr)
			}
			continue
		}
		if err != nil || src != (Source{Name: c.name, Auth: Auth(c.auth), Secret: c.key}) {
			t.Errorf("NewSource(%q, %q, %q) = %+v, %v", c.name, c.auth, c.key, src, err)
		}
	}
}

// A handler follows the bucket: a source added there is served, one removed is 404, and a
// flag's source of the same name keeps the flag's authentication (the flag wins), with a
// warning. Deliveries land in the source's history, newest first, at most KeepDeliveries.
func TestWatchFollowsTheBucketAndFlagsWin(t *testing.T) {
	_, js := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "HOOKS", Subjects: []string{"webhook.>"}}); err != nil {
		t.Fatal(err)
	}
	reg, err := OpenRegistry(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.DebugLevel)
	h := New(js, nil, zap.New(core), Config{Sources: []Source{{Name: "flagged", Auth: Bearer, Secret: "flag-key"}}, Registry: reg, HostID: "h1"})
	if err := h.Watch(ctx); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /hooks/{source}", h)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	post := func(source string) int {
		resp, err := http.Post(srv.URL+"/hooks/"+source, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	eventually := func(what string, cond func() bool) {
		t.Helper()
		for ctx.Err() == nil {
			if cond() {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("never: %s", what)
	}
	if code := post("open-one"); code != 404 {
		t.Fatalf("before the add: %d", code)
	}
	for _, src := range []Source{{Name: "open-one", Auth: Open}, {Name: "flagged", Auth: Open}} {
		if _, err := reg.Add(ctx, src, "test"); err != nil {
			t.Fatal(err)
		}
	}
	eventually("the added open source takes deliveries", func() bool { return post("open-one") == 202 })
	eventually("the flag's warning", func() bool {
		return logs.FilterMessageSnippet("the flag's declaration wins here").Len() == 1
	})
	// The bucket says open; the flag says bearer, and without a key store that is 503, not 202.
	if code := post("flagged"); code != 503 {
		t.Fatalf("a flag source that the bucket declares open: %d, want the flag's bearer (503 without keys)", code)
	}
	for range KeepDeliveries + 2 {
		if code := post("open-one"); code != 202 {
			t.Fatalf("delivery: %d", code)
		}
	}
	ds, err := reg.Deliveries(ctx, "open-one")
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != KeepDeliveries || ds[0].Status != 202 || ds[0].ID == "" || ds[0].Host != "h1" || !ds[0].At.After(ds[len(ds)-1].At) {
		t.Fatalf("the history holds %d deliveries, first %+v", len(ds), ds[0])
	}
	if err := reg.Remove(ctx, "open-one"); err != nil {
		t.Fatal(err)
	}
	eventually("the removed source answers 404", func() bool { return post("open-one") == 404 })
	// A delivery taken while the removal was on its way is recorded and then dropped with the
	// rest, by the delivery itself or by the host once it stops serving the source.
	eventually("the removed source's history goes", func() bool {
		ds, err := reg.Deliveries(ctx, "open-one")
		return err == nil && len(ds) == 0
	})
}
