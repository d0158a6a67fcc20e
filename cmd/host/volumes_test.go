package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/objstore"
	"github.com/agenthost/host/internal/testkit/natstest"
)

// cliNATS starts a NATS with what the client commands bind to (job records, dead letters,
// volumes) and returns its URL, with no host serving: these commands only read and change
// JetStream.
func cliNATS(t *testing.T) (string, *nats.Conn, *objstore.Volumes) {
	t.Helper()
	ctx := context.Background()
	nc, js := natstest.Start(t)
	if _, err := jobs.Open(ctx, js, time.Hour, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.EnsureDeadStream(ctx, js, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	b, err := objstore.NewJetStreamBackend(ctx, js, objstore.DefaultJetStreamBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	v, err := objstore.New(ctx, js, b, objstore.Options{Log: zap.NewNop(), CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return nc.ConnectedUrl(), nc, v
}

// commitVolume makes a new version of a volume holding files.
func commitVolume(t *testing.T, v *objstore.Volumes, name, job string, files map[string]string) {
	t.Helper()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "vol")
	m, err := v.Mount(ctx, name, dir, job)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release(ctx)
	for p, content := range files {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Commit(ctx, job); err != nil {
		t.Fatal(err)
	}
}

func TestVolumesCLI(t *testing.T) {
	url, _, v := cliNATS(t)
	commitVolume(t, v, "notes", "job-1", map[string]string{"a.txt": "hello", "sub/b.txt": "123"})
	commitVolume(t, v, "notes", "job-2", map[string]string{"c.txt": "x"})

	out, errOut, code := run(t, "--nats", url, "volumes", "ls")
	if code != 0 || !strings.Contains(out, "NAME") || !strings.Contains(out, "UPDATED") {
		t.Fatalf("volumes ls: code %d, %q %q", code, out, errOut)
	}
	fields := strings.Fields(strings.Split(out, "\n")[1])
	// name, version, files (a.txt, sub, sub/b.txt, c.txt), bytes, date, time, last job
	if len(fields) != 7 || fields[0] != "notes" || fields[1] != "2" || fields[2] != "4" || fields[3] != "9" || fields[6] != "job-2" {
		t.Fatalf("volumes ls row: %q", fields)
	}
	out, _, code = run(t, "--nats", url, "volumes", "ls", "--json")
	var infos []objstore.VolumeInfo
	if code != 0 || json.Unmarshal([]byte(out), &infos) != nil || len(infos) != 1 || infos[0].Bytes != 9 {
		t.Fatalf("volumes ls --json: code %d, %q", code, out)
	}

	cases := []struct {
		args []string
		want []string
		not  []string
	}{
		{[]string{"notes"}, []string{"a.txt", "5", "-rw-r--r--", "sub/", "drwx", "sub/b.txt", "c.txt"}, nil},
		{[]string{"notes", "1"}, []string{"a.txt", "sub/b.txt"}, []string{"c.txt"}},
	}
	for _, c := range cases {
		out, errOut, code := run(t, append([]string{"--nats", url, "volumes", "files"}, c.args...)...)
		if code != 0 {
			t.Fatalf("volumes files %v: code %d, %s", c.args, code, errOut)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("volumes files %v lacks %q: %s", c.args, w, out)
			}
		}
		for _, w := range c.not {
			if strings.Contains(out, w) {
				t.Errorf("volumes files %v has %q: %s", c.args, w, out)
			}
		}
	}
	out, _, code = run(t, "--nats", url, "volumes", "files", "notes", "--json")
	var files []objstore.FileInfo
	if code != 0 || json.Unmarshal([]byte(out), &files) != nil || len(files) != 4 {
		t.Fatalf("volumes files --json: code %d, %q", code, out)
	}
	if _, errOut, code := run(t, "--nats", url, "volumes", "files", "notes", "7"); code != 1 || !strings.Contains(errOut, "kept versions: 1 to 2") {
		t.Fatalf("volumes files of a version not kept: code %d, %s", code, errOut)
	}

	// get -o writes the tar to a file; to a pipe (not a terminal) stdout is allowed.
	tarFile := filepath.Join(t.TempDir(), "notes.tar")
	if _, errOut, code := run(t, "--nats", url, "volumes", "get", "notes", "-o", tarFile); code != 0 {
		t.Fatalf("volumes get -o: %s", errOut)
	}
	data, _ := os.ReadFile(tarFile)
	if names := tarNames(t, data); !strings.Contains(names, "a.txt") || !strings.Contains(names, "sub/b.txt") {
		t.Fatalf("tar from -o holds %s", names)
	}
	out, _, code = run(t, "--nats", url, "volumes", "get", "notes")
	if code != 0 || !strings.Contains(tarNames(t, []byte(out)), "c.txt") {
		t.Fatalf("volumes get to a pipe: code %d", code)
	}

	// rm without a terminal and without --yes refuses, saying how; with --yes it reports.
	_, errOut, code = run(t, "--nats", url, "volumes", "rm", "notes")
	if code != 1 || !strings.Contains(errOut, "--yes") {
		t.Fatalf("volumes rm without --yes: code %d, %s", code, errOut)
	}
	if out, _, _ := run(t, "--nats", url, "volumes", "ls"); !strings.Contains(out, "notes") {
		t.Fatalf("volumes rm without --yes removed it: %s", out)
	}
	out, errOut, code = run(t, "--nats", url, "volumes", "rm", "notes", "--yes")
	if code != 0 || !strings.Contains(out, "removed volume notes") || !strings.Contains(out, "4 files, 9 bytes") {
		t.Fatalf("volumes rm --yes: code %d, %q %s", code, out, errOut)
	}
	if out, _, _ := run(t, "--nats", url, "volumes", "ls"); strings.Contains(out, "notes") {
		t.Fatalf("volumes ls after rm: %s", out)
	}
}

func tarNames(t *testing.T, data []byte) string {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(data))
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return strings.Join(names, " ")
		}
		if err != nil {
			t.Fatalf("not a tar stream: %v", err)
		}
		names = append(names, h.Name)
	}
}

func TestDeadCLI(t *testing.T) {
	url, nc, _ := cliNATS(t)
	ids := []string{"job0000000000000000001", "job0000000000000000002", "job0000000000000000003"}
	for i, fn := range []string{"a", "a", "b"} {
		m := nats.NewMsg(bus.DeadPrefix + fn + "." + ids[i])
		m.Header.Set(bus.HeaderJobID, ids[i])
		m.Header.Set(bus.HeaderDeadFunction, fn)
		m.Header.Set(bus.HeaderDeadError, "boom")
		if _, err := nc.RequestMsg(m, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	out, errOut, code := run(t, "--nats", url, "dead", "rm", ids[0])
	if code != 0 || !strings.Contains(out, "removed 1 dead letter(s) of job "+ids[0]) {
		t.Fatalf("dead rm: code %d, %q %s", code, out, errOut)
	}
	if _, errOut, code = run(t, "--nats", url, "dead", "rm", ids[0]); code != 1 || !strings.Contains(errOut, "no dead letter") {
		t.Fatalf("dead rm again: code %d, %s", code, errOut)
	}
	if _, errOut, code = run(t, "--nats", url, "dead", "purge"); code != 1 || !strings.Contains(errOut, "function") {
		t.Fatalf("dead purge without --function: code %d, %s", code, errOut)
	}
	out, errOut, code = run(t, "--nats", url, "dead", "purge", "--function", "a")
	if code != 0 || !strings.Contains(out, "removed 1 dead letter(s) of function a") {
		t.Fatalf("dead purge: code %d, %q %s", code, out, errOut)
	}
	out, _, code = run(t, "--nats", url, "dead", "ls", "--json")
	var left []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &left) != nil || len(left) != 1 || left[0]["job_id"] != ids[2] {
		t.Fatalf("dead ls after rm and purge: code %d, %s", code, out)
	}
}

// TestVolumesOnATerminal runs the commands under script(1), which gives them a terminal:
// get refuses to write a tar stream there, and rm asks.
func TestVolumesOnATerminal(t *testing.T) {
	if _, err := exec.LookPath("script"); err != nil {
		t.Skip("SKIPPED LOUDLY: script (util-linux) is not installed; it provides the terminal")
	}
	url, _, v := cliNATS(t)
	commitVolume(t, v, "notes", "job-1", map[string]string{"a.txt": "hello", "sub/b.txt": "123"})
	onTerminal := func(stdin, cmdline string) (string, int) {
		t.Helper()
		cmd := exec.Command("script", "-qec", hostBin+" --nats "+url+" "+cmdline, "/dev/null")
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	cases := []struct {
		stdin, cmdline string
		code           int
		want           string
	}{
		{"", "volumes get notes", 1, "not writing a tar stream to the terminal"},
		{"", "volumes get notes sub", 1, "not writing a tar stream to the terminal"},
		{"", "volumes get notes a.txt", 0, "hello"},
		{"n\n", "volumes rm notes", 1, "not confirmed"},
		{"y\n", "volumes rm notes", 0, "removed volume notes"},
	}
	for _, c := range cases {
		out, code := onTerminal(c.stdin, c.cmdline)
		if code != c.code || !strings.Contains(out, c.want) {
			t.Fatalf("%s on a terminal: code %d, want %d and %q:\n%s", c.cmdline, code, c.code, c.want, out)
		}
		if strings.Contains(c.cmdline, "rm") && !strings.Contains(out, "remove volume notes (1 kept version(s)") {
			t.Fatalf("rm did not ask: %s", out)
		}
	}
}
