package bus

import (
	"context"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// freeAddr is a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// Connect's first-connection retries run on the bubble's clock: how long it tries and how
// often are exact, and the test does not wait for them.
func TestConnectRetriesForMaxWait(t *testing.T) {
	cases := []struct {
		name         string
		maxWait      time.Duration
		wantAttempts func(n int) bool
	}{
		{name: "no MaxWait: one try", maxWait: 0, wantAttempts: func(n int) bool { return n == 0 }},
		{name: "retries with backoff until MaxWait", maxWait: 20 * time.Second, wantAttempts: func(n int) bool { return n >= 5 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url := "nats://" + freeAddr(t)
			synctest.Test(t, func(t *testing.T) {
				core, logs := observer.New(zap.WarnLevel)
				start := time.Now()
				_, err := Connect(context.Background(), ConnectOptions{URL: url, MaxWait: tc.maxWait}, zap.New(core))
				elapsed := time.Since(start)
				if err == nil || !strings.Contains(err.Error(), "is the server running?") || !strings.Contains(err.Error(), url) {
					t.Fatalf("error %v; want one naming %s and what to do", err, url)
				}
				// It stops when the next wait would pass MaxWait: never after it, and no earlier
				// than one longest interval (5s, up to 7.5s with jitter) before it.
				if elapsed > tc.maxWait || elapsed < tc.maxWait-7500*time.Millisecond {
					t.Errorf("gave up after %v, want within the 7.5s before MaxWait %v", elapsed, tc.maxWait)
				}
				if n := logs.FilterMessage("cannot reach NATS yet; retrying").Len(); !tc.wantAttempts(n) {
					t.Errorf("%d retries logged", n)
				}
			})
		})
	}
}

// Once connected, reconnection attempts are spaced exponentially up to a second, and a fresh
// outage starts again from the shortest delay.
func TestReconnectDelay(t *testing.T) {
	delay := reconnectDelay()
	var prev time.Duration
	for attempt := 1; attempt <= 20; attempt++ {
		d := delay(attempt)
		if d <= 0 || d > 1500*time.Millisecond {
			t.Fatalf("attempt %d: delay %v, want (0, 1s] with jitter", attempt, d)
		}
		if attempt == 20 && d < 500*time.Millisecond {
			t.Fatalf("attempt 20: delay %v, want it grown to about a second", d)
		}
		prev = d
	}
	if d := delay(1); d >= prev || d > 100*time.Millisecond {
		t.Fatalf("a new outage starts at %v, want about 50ms", d)
	}
}
