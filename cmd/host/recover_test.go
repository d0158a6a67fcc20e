package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/objstore"
	"github.com/agenthost/host/internal/testkit/s3test"
)

// `host volumes recover` against a store that holds no volumes says so, fails, and writes
// nothing; against one whose heads NATS lost it rebuilds them (a dry run first), and run again
// it moves nothing.
func TestVolumesRecoverCLI(t *testing.T) {
	url, nc, v := cliNATS(t)
	out, errOut, code := run(t, "--nats", url, "volumes", "recover")
	if code == 0 || !strings.Contains(errOut, "holds no volumes") || !strings.Contains(out, "jetstream:agent_volumes: 0 volume(s) found") {
		t.Fatalf("recover from an empty store: code %d, %q %q", code, out, errOut)
	}

	commitVolume(t, v, "notes", "job-1", map[string]string{"a.txt": "hello"})
	commitVolume(t, v, "notes", "job-2", map[string]string{"b.txt": "world"})
	commitVolume(t, v, "ledger", "job-3", map[string]string{"n": "1"})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(context.Background(), objstore.HeadsBucket); err != nil {
		t.Fatal(err)
	}

	out, errOut, code = run(t, "--nats", url, "volumes", "recover", "--dry-run")
	if code != 0 || !strings.Contains(out, "would recover 2, skipped 0, broken 0") || !strings.Contains(out, "would recover\n") {
		t.Fatalf("dry run: code %d, %q %q", code, out, errOut)
	}
	if out, _, _ := run(t, "--nats", url, "volumes", "ls"); strings.Contains(out, "notes") {
		t.Fatalf("a dry run wrote heads: %q", out)
	}

	out, errOut, code = run(t, "--nats", url, "volumes", "recover")
	if code != 0 || !strings.Contains(out, "VOLUME") || !strings.Contains(out, "recovered 2, skipped 0, broken 0") {
		t.Fatalf("recover: code %d, %q %q", code, out, errOut)
	}
	t.Logf("recover:\n%s", out)
	lines := strings.Split(out, "\n")
	// ledger, then notes: name, store version, NATS version, versions, action
	if f := strings.Fields(lines[2]); len(f) != 5 || f[0] != "notes" || f[1] != "2" || f[2] != "-" || f[3] != "2" || f[4] != "recovered" {
		t.Fatalf("notes row %q in:\n%s", lines[2], out)
	}
	out, errOut, code = run(t, "--nats", url, "volumes", "history", "notes")
	if code != 0 || !strings.Contains(out, "job-1") || !strings.Contains(out, "job-2") {
		t.Fatalf("history after recovery: code %d, %q %q", code, out, errOut)
	}
	if out, _, code := run(t, "--nats", url, "volumes", "get", "notes", "b.txt"); code != 0 || out != "world" {
		t.Fatalf("get after recovery: code %d, %q", code, out)
	}

	out, errOut, code = run(t, "--nats", url, "volumes", "recover", "--json")
	var rep objstore.RecoverReport
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil {
		t.Fatalf("recover --json: code %d, %q %q", code, out, errOut)
	}
	if rep.Recovered != 0 || rep.Skipped != 2 || rep.Volumes[1].Action != objstore.RecoverAtOrPast || rep.Volumes[1].NATSVersion != 2 {
		t.Fatalf("recover over the heads it made: %+v", rep)
	}
}

// Volumes are not encrypted, so no host key is involved: another host's (or a wrong) S3
// credential is refused by the store itself, and nothing in NATS changes.
func TestVolumesRecoverWithAnotherCredential(t *testing.T) {
	_, nc, _ := cliNATS(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s3 := s3test.Start(t)
	ctx := context.Background()
	b, err := objstore.NewS3Backend(ctx, s3)
	if err != nil {
		t.Fatal(err)
	}
	v, err := objstore.New(ctx, js, b, objstore.Options{Log: zap.NewNop(), CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	commitVolume(t, v, "notes", "job-1", map[string]string{"a.txt": "hello"})
	if err := js.DeleteKeyValue(ctx, objstore.HeadsBucket); err != nil {
		t.Fatal(err)
	}
	args := []string{"--nats", nc.ConnectedUrl(), "volumes", "recover", "--s3-endpoint", s3.Endpoint, "--s3-bucket", s3.Bucket,
		"--s3-access-key", s3test.AccessKey, "--s3-region", s3.Region}
	out, errOut, code := run(t, append(args, "--s3-secret-key", "not-this-hosts")...)
	if code == 0 || !strings.Contains(errOut, "credentials") {
		t.Fatalf("recover with a wrong secret: code %d, %q %q", code, out, errOut)
	}
	if out, _, _ := run(t, "--nats", nc.ConnectedUrl(), "volumes", "ls", "--s3-endpoint", s3.Endpoint, "--s3-bucket", s3.Bucket,
		"--s3-access-key", s3test.AccessKey, "--s3-secret-key", s3test.SecretKey, "--s3-region", s3.Region); strings.Contains(out, "notes") {
		t.Fatalf("a refused recovery wrote a head: %q", out)
	}
	out, errOut, code = run(t, append(args, "--s3-secret-key", s3test.SecretKey)...)
	if code != 0 || !strings.Contains(out, "recovered 1") {
		t.Fatalf("recover with the right secret: code %d, %q %q", code, out, errOut)
	}
}
