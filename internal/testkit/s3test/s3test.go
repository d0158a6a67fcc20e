// Package s3test runs a real S3 server, versitygw over a temporary directory, for tests of
// code that stores volumes in S3.
package s3test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/host/internal/objstore"
)

// InstallCommand installs the versitygw this package runs.
const InstallCommand = "go install github.com/versity/versitygw/cmd/versitygw@v1.8.0"

// Credentials of the gateway's root account.
const (
	AccessKey = "test"
	SecretKey = "testsecret"
)

// Binary finds versitygw: $VERSITYGW, then $PATH, then $GOBIN, $GOPATH/bin and ~/go/bin.
func Binary() (string, error) {
	if p := os.Getenv("VERSITYGW"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	var dirs []string
	if d := os.Getenv("GOBIN"); d != "" {
		dirs = append(dirs, d)
	}
	if d := os.Getenv("GOPATH"); d != "" {
		dirs = append(dirs, filepath.Join(d, "bin"))
	}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, "go", "bin"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, "versitygw")
		if info, err := os.Stat(p); err == nil && !info.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("versitygw not found in $VERSITYGW, $PATH, $GOBIN, $GOPATH/bin or ~/go/bin; install it with: %s", InstallCommand)
}

// Start runs a versitygw on a free loopback port, serving a temporary directory, until the test
// ends, and returns a config for it with a fresh bucket name (NewS3Backend creates the bucket).
// Without the binary the test is skipped, loudly, or fails when S3TEST_REQUIRE is set (CI).
func Start(t testing.TB) objstore.S3Config {
	t.Helper()
	return StartWith(t)
}

// StartWith is Start with more of versitygw's flags before its backend, e.g. its bucket
// notifications: "--event-nats-url", url, "--event-nats-topic", "s3.events".
func StartWith(t testing.TB, flags ...string) objstore.S3Config {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		if os.Getenv("S3TEST_REQUIRE") != "" {
			t.Fatalf("S3TEST_REQUIRE is set but %v", err)
		}
		t.Skipf("\n\n*** SKIPPING S3 TESTS: %v ***\n\n", err)
	}
	dir := t.TempDir()
	// A port picked by closing a listener can be taken again before versitygw binds it.
	var last error
	for range 3 {
		addr, err := freePort()
		if err != nil {
			t.Fatalf("find a free port for versitygw: %v", err)
		}
		stop, err := run(bin, addr, dir, flags)
		if err != nil {
			last = err
			continue
		}
		t.Cleanup(stop)
		return objstore.S3Config{Endpoint: addr, Bucket: "volumes-" + randomHex(4), AccessKey: AccessKey, SecretKey: SecretKey, Region: "us-east-1"}
	}
	t.Fatalf("start versitygw: %v", last)
	return objstore.S3Config{}
}

func run(bin, addr, dir string, flags []string) (func(), error) {
	var out syncBuffer
	args := append([]string{"--access", AccessKey, "--secret", SecretKey, "--port", addr, "--quiet"}, flags...)
	cmd := exec.Command(bin, append(args, "posix", dir)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("run %s: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	stop := func() {
		cmd.Process.Kill()
		<-exited
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	for {
		// Any HTTP answer (403 without credentials) means it serves.
		if resp, err := client.Get("http://" + addr + "/"); err == nil {
			resp.Body.Close()
			return stop, nil
		}
		select {
		case <-exited:
			return nil, fmt.Errorf("versitygw exited at start: %s", out.String())
		case <-ctx.Done():
			stop()
			return nil, fmt.Errorf("versitygw did not answer on %s within 30s: %s", addr, out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
