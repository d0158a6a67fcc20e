package objstore_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/host/internal/objstore"
	"github.com/agenthost/host/internal/testkit/natstest"
	"github.com/agenthost/host/internal/testkit/s3test"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestVersionsCLI(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		v := e.volumes(t)
		mountEdit(t, v, "proj", "job-1", func(d string) {
			writeTree(t, d, map[string]node{"a": file(0o644, "one"), "d": dir(0o755), "d/x": file(0o600, "x"), "l": link("a")})
		})
		mountEdit(t, v, "proj", "job-2", func(d string) {
			writeTree(t, d, map[string]node{"a": file(0o644, "two"), "b": file(0o644, "new")})
		})
		mountEdit(t, v, "other", "job-3", func(d string) { writeTree(t, d, map[string]node{"o": file(0o644, "o")}) })

		names, err := v.List(ctx)
		if err != nil || !slices.Equal(names, []string{"other", "proj"}) {
			t.Fatalf("List = %v, %v", names, err)
		}
		hist, err := v.History(ctx, "proj")
		if err != nil {
			t.Fatal(err)
		}
		if len(hist) != 2 || hist[0].JobID != "job-1" || hist[0].Files != 4 || hist[0].FilesChanged != 4 || hist[0].TotalBytes != 4 ||
			hist[1].JobID != "job-2" || hist[1].FilesChanged != 2 || hist[1].Bytes != 6 || hist[1].Files != 5 || hist[1].Time.IsZero() {
			t.Errorf("History = %+v", hist)
		}

		get := func(version uint64, p string) (string, error) {
			var b bytes.Buffer
			err := v.Get(ctx, "proj", version, p, &b)
			return b.String(), err
		}
		for _, c := range []struct {
			version uint64
			path    string
			want    string
		}{{1, "a", "one"}, {2, "a", "two"}, {0, "a", "two"}, {0, "/d/x", "x"}, {0, "b", "new"}} {
			if got, err := get(c.version, c.path); err != nil || got != c.want {
				t.Errorf("Get(%d, %q) = %q, %v; want %q", c.version, c.path, got, err, c.want)
			}
		}
		// A CLI has no cache: Get streams from the store, Mount refuses.
		cli := e.volumes(t, func(o *objstore.Options) { o.CacheDir = "" })
		var b bytes.Buffer
		if err := cli.Get(ctx, "proj", 1, "a", &b); err != nil || b.String() != "one" {
			t.Errorf("Get without a cache = %q, %v", b.String(), err)
		}
		if _, err := cli.Mount(ctx, "proj", t.TempDir(), "cli"); err == nil || !strings.Contains(err.Error(), "CacheDir") {
			t.Errorf("Mount without a cache: %v", err)
		}
		if _, err := get(1, "b"); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("Get of a path missing in version 1: %v", err)
		}
		if _, err := get(9, "a"); !errors.Is(err, objstore.ErrNotFound) || !strings.Contains(err.Error(), "1 to 2") {
			t.Errorf("Get of an unknown version: %v", err)
		}
		if _, err := get(0, "l"); err == nil || !strings.Contains(err.Error(), "symlink") {
			t.Errorf("Get of a symlink: %v", err)
		}
		tarOf := func(version uint64, p string) map[string]string {
			var b bytes.Buffer
			if err := v.Get(ctx, "proj", version, p, &b); err != nil {
				t.Fatal(err)
			}
			out := map[string]string{}
			tr := tar.NewReader(&b)
			for {
				h, err := tr.Next()
				if err == io.EOF {
					return out
				}
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(tr)
				out[h.Name] = fmt.Sprintf("%c %o %s%s", h.Typeflag, h.Mode, body, h.Linkname)
			}
		}
		want1 := map[string]string{"a": "0 644 one", "d/": "5 755 ", "d/x": "0 600 x", "l": "2 777 a"}
		if got := tarOf(1, ""); !mapsEqual(got, want1) {
			t.Errorf("tar of version 1 = %v, want %v", got, want1)
		}
		if got := tarOf(0, "d"); !mapsEqual(got, map[string]string{"d/": "5 755 ", "d/x": "0 600 x"}) {
			t.Errorf("tar of d = %v", got)
		}

		n, err := v.Restore(ctx, "proj", 1, "restorer")
		if err != nil || n != 3 {
			t.Fatalf("Restore = %d, %v; want 3", n, err)
		}
		got, _ := checkout(t, e.volumes(t), "proj")
		diffTrees(t, map[string]node{"a": file(0o644, "one"), "d": dir(0o755), "d/x": file(0o600, "x"), "l": link("a")}, got)
		if hist, _ := v.History(ctx, "proj"); len(hist) != 3 || hist[2].JobID != "restorer" || hist[2].FilesChanged != 2 {
			t.Errorf("history after restore = %+v", hist)
		}

		if err := v.Remove(ctx, "proj", "remover"); err != nil {
			t.Fatal(err)
		}
		if names, _ := v.List(ctx); !slices.Equal(names, []string{"other"}) {
			t.Errorf("List after Remove = %v", names)
		}
		if _, err := v.History(ctx, "proj"); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("History after Remove: %v", err)
		}
		if err := v.Remove(ctx, "proj", "remover"); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("second Remove: %v", err)
		}
		if blobs, manifests := storedKeys(t, e.b, "proj"); len(blobs)+len(manifests) != 0 {
			t.Errorf("objects left after Remove: %v %v", blobs, manifests)
		}
		// The name can be used again, from scratch.
		if res := mountEdit(t, v, "proj", "job-4", func(d string) {
			if des, _ := os.ReadDir(d); len(des) != 0 {
				t.Errorf("a removed volume mounts with %d entries", len(des))
			}
			writeTree(t, d, map[string]node{"z": file(0o644, "z")})
		}); res.Version != 1 {
			t.Errorf("first commit after Remove: %+v", res)
		}
	})
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestManifestSafety(t *testing.T) {
	e := newEnv(t, "jetstream")
	outside := filepath.Join(t.TempDir(), "outside")
	h := sha("evil")
	f := func(p string) map[string]any {
		return map[string]any{"path": p, "type": "file", "mode": 0o644, "size": 4, "sha256": h}
	}
	d := func(p string) map[string]any { return map[string]any{"path": p, "type": "dir", "mode": 0o755} }
	l := func(p, target string) map[string]any {
		return map[string]any{"path": p, "type": "symlink", "mode": 0o777, "target": target}
	}
	cases := []struct {
		name    string
		entries []map[string]any
		want    string
	}{
		{"dotdot", []map[string]any{f("../x")}, "leaves the volume"},
		{"dotdot inside", []map[string]any{d("a"), f("a/../../x")}, "not clean"},
		{"absolute", []map[string]any{f(outside)}, "absolute"},
		{"file below a symlink", []map[string]any{l("link", filepath.Dir(outside)), f("link/outside")}, "symlink"},
		{"dir below a symlink", []map[string]any{l("link", "/tmp"), d("link/sub")}, "symlink"},
		{"file below a file", []map[string]any{f("a"), f("a/b")}, "is a file"},
		{"missing parent", []map[string]any{f("nodir/b")}, "no directory entry"},
		{"duplicate", []map[string]any{f("a"), f("a")}, "sorted and unique"},
		{"nul", []map[string]any{f("a\x00b")}, "NUL"},
		{"setuid", []map[string]any{{"path": "a", "type": "file", "mode": 0o4755, "size": 4, "sha256": h}}, "permission bits"},
		{"bad hash", []map[string]any{{"path": "a", "type": "file", "mode": 0o644, "sha256": "../../x"}}, "bad hash"},
		{"device", []map[string]any{{"path": "a", "type": "chardev", "mode": 0o644}}, "unknown type"},
		{"empty path", []map[string]any{f("")}, "empty path"},
	}
	v := e.volumes(t)
	ctx := context.Background()
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			name := fmt.Sprintf("crafted%d", i)
			if err := objstore.PutRawVersion(ctx, v, name, c.entries); err != nil {
				t.Fatal(err)
			}
			parent := t.TempDir()
			_, err := v.Mount(ctx, name, filepath.Join(parent, "vol"), "job")
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "refusing") {
				t.Fatalf("Mount of a crafted manifest: %v; want an error about %q", err, c.want)
			}
			// Row 10 of the red team: a crafted manifest was retried 12 times as if the store were
			// down. It is corrupt content, which the runner fails at once.
			if !errors.Is(err, objstore.ErrCorrupt) {
				t.Fatalf("Mount of a crafted manifest: %v does not wrap ErrCorrupt, so the job would be retried as an outage", err)
			}
			if _, err := os.Lstat(outside); err == nil {
				t.Fatalf("%s was written", outside)
			}
			des, _ := os.ReadDir(parent)
			if len(des) != 0 {
				t.Errorf("Mount wrote %v before refusing", des)
			}
		})
	}
}

func TestMountNeedsEmptyDir(t *testing.T) {
	e := newEnv(t, "jetstream")
	v := e.volumes(t)
	d := t.TempDir()
	os.WriteFile(filepath.Join(d, "x"), nil, 0o644)
	if _, err := v.Mount(context.Background(), "v1", d, "job"); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("Mount into a non-empty directory: %v", err)
	}
	// The failed mount released the lease.
	checkout(t, v, "v1")
}

func TestConcurrentRuns(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		core, logs := observer.New(zap.InfoLevel)
		reg := prometheus.NewRegistry()
		ctx := context.Background()
		const runs = 10
		// A first holder keeps the lease until a run has said it waits for it, so the runs
		// contend however slowly a loaded machine starts them.
		first, err := e.volumes(t).Mount(ctx, "counter", filepath.Join(t.TempDir(), "vol"), "first")
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, runs)
		for i := range runs {
			// Each run on its own "host": its own Volumes and cache.
			v := e.volumes(t, func(o *objstore.Options) { o.Log, o.Registerer = zap.New(core), reg })
			wg.Go(func() {
				errs <- func() error {
					d := filepath.Join(t.TempDir(), "vol")
					job := fmt.Sprintf("job-%d", i)
					m, err := v.Mount(ctx, "counter", d, job)
					if err != nil {
						return err
					}
					defer m.Release(ctx)
					n := 0
					if b, err := os.ReadFile(filepath.Join(d, "n")); err == nil {
						n, _ = strconv.Atoi(string(b))
					}
					if err := os.WriteFile(filepath.Join(d, "n"), []byte(strconv.Itoa(n+1)), 0o644); err != nil {
						return err
					}
					_, err = m.Commit(ctx, job)
					return err
				}()
			})
		}
		natstest.Eventually(t, "a run waits for the first holder's lease", func() bool {
			return logs.FilterMessage("waiting for volume lease").Len() > 0
		})
		if err := first.Release(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
		var b bytes.Buffer
		if err := e.volumes(t).Get(ctx, "counter", 0, "n", &b); err != nil || b.String() != strconv.Itoa(runs) {
			t.Fatalf("counter = %q, %v; want %d", b.String(), err, runs)
		}
		if got := histogramCount(t, reg, "host_volume_lease_wait_seconds"); got != runs {
			t.Errorf("lease wait observations = %d, want %d", got, runs)
		}
		if logs.FilterMessage("took volume lease after waiting").Len() == 0 {
			t.Error("no run logged that it took the lease after waiting")
		}
	})
}

func histogramCount(t testing.TB, reg *prometheus.Registry, name string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

func counterValue(t testing.TB, reg *prometheus.Registry, name, direction string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "direction" && l.GetValue() == direction {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}

func TestDeadHolderLeaseExpires(t *testing.T) {
	e := newEnv(t, "jetstream")
	core, logs := observer.New(zap.InfoLevel)
	v := e.volumes(t, func(o *objstore.Options) { o.LeaseTTL, o.Log = time.Second, zap.New(core) })
	ctx := context.Background()
	// A host that took the lease and died: nobody renews or releases it.
	kv, err := e.js.KeyValue(ctx, objstore.LeasesBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "vol", []byte(`{"holder":"dead-job","host":"dead-host","nonce":"x"}`)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	m, err := v.Mount(ctx, "vol", filepath.Join(t.TempDir(), "vol"), "next-job")
	if err != nil {
		t.Fatalf("Mount after the holder died: %v", err)
	}
	defer m.Release(ctx)
	waits := logs.FilterMessage("waiting for volume lease").All()
	if len(waits) != 1 || waits[0].ContextMap()["held_by"] != "dead-job" {
		t.Errorf("wait logs = %+v, want one naming dead-job", waits)
	}
}

func TestLeaseRenewed(t *testing.T) {
	e := newEnv(t, "jetstream")
	v := e.volumes(t, func(o *objstore.Options) { o.LeaseTTL = time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := e.js.KeyValue(ctx, objstore.LeasesBucket)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.Watch(ctx, "vol", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	d := filepath.Join(t.TempDir(), "vol")
	m, err := v.Mount(ctx, "vol", d, "holder")
	if err != nil {
		t.Fatal(err)
	}
	// The take, then renewals: each a new revision, which restarts the entry's age.
	var revs []uint64
	for len(revs) < 4 {
		select {
		case e := <-w.Updates():
			if e != nil {
				if e.Operation() != jetstream.KeyValuePut {
					t.Fatalf("lease entry %v while held", e.Operation())
				}
				revs = append(revs, e.Revision())
			}
		case <-ctx.Done():
			t.Fatalf("saw %d lease writes, want a take and 3 renewals", len(revs))
		}
	}
	writeTree(t, d, map[string]node{"f": file(0o644, "x")})
	if _, err := m.Commit(ctx, "holder"); err != nil {
		t.Fatalf("commit after renewals: %v", err)
	}
	if err := m.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "vol"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("lease after Release: %v, want deleted", err)
	}
}

func TestLostLeaseRefusesCommit(t *testing.T) {
	e := newEnv(t, "jetstream")
	v := e.volumes(t, func(o *objstore.Options) { o.LeaseTTL = 2 * time.Second })
	ctx := context.Background()
	mountEdit(t, v, "vol", "job-1", func(d string) { writeTree(t, d, map[string]node{"f": file(0o644, "v1")}) })
	d := filepath.Join(t.TempDir(), "vol")
	m, err := v.Mount(ctx, "vol", d, "stalled-job")
	if err != nil {
		t.Fatal(err)
	}
	// The lease expires while the host stalls, and another run takes it.
	kv, _ := e.js.KeyValue(ctx, objstore.LeasesBucket)
	if err := kv.Purge(ctx, "vol"); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "vol", []byte(`{"holder":"other-job","nonce":"y"}`)); err != nil {
		t.Fatal(err)
	}
	writeTree(t, d, map[string]node{"f": file(0o644, "stale write")})
	_, err = m.Commit(ctx, "stalled-job")
	if !errors.Is(err, objstore.ErrLeaseLost) || !strings.Contains(err.Error(), "nothing was committed") {
		t.Fatalf("commit without the lease: %v; want ErrLeaseLost", err)
	}
	if err := m.Release(ctx); err != nil {
		t.Errorf("Release of a lost lease: %v", err)
	}
	if e, err := kv.Get(ctx, "vol"); err != nil || !strings.Contains(string(e.Value()), "other-job") {
		t.Errorf("Release touched the other run's lease: %v", err)
	}
	if hist, _ := v.History(ctx, "vol"); len(hist) != 1 {
		t.Errorf("history = %+v, want version 1 only", hist)
	}
}

func TestDottedNames(t *testing.T) {
	e := newEnv(t, "jetstream")
	v := e.volumes(t)
	names := []string{"a..b", "a.b", "a-.b", "x_y.z"}
	for _, n := range names {
		mountEdit(t, v, n, "job", func(d string) { writeTree(t, d, map[string]node{"name": file(0o644, n)}) })
	}
	for _, n := range names {
		var b bytes.Buffer
		if err := v.Get(context.Background(), n, 0, "name", &b); err != nil || b.String() != n {
			t.Errorf("Get(%q) = %q, %v", n, b.String(), err)
		}
	}
	got, err := v.List(context.Background())
	want := slices.Sorted(slices.Values(names))
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("List = %v, %v; want %v", got, err, want)
	}
	if _, err := v.Mount(context.Background(), "../etc", t.TempDir(), "job"); err == nil {
		t.Error("Mount accepted the name ../etc")
	}
}

func TestMetrics(t *testing.T) {
	e := newEnv(t, "jetstream")
	reg := prometheus.NewRegistry()
	withReg := func(o *objstore.Options) { o.Registerer = reg }
	mountEdit(t, e.volumes(t, withReg), "mm", "job", func(d string) {
		writeTree(t, d, map[string]node{"a": file(0o644, "12345"), "b": file(0o644, "123")})
	})
	checkout(t, e.volumes(t, withReg), "mm")
	if got := counterValue(t, reg, "host_volume_bytes_transferred_total", "out"); got != 8 {
		t.Errorf("bytes out = %v, want 8", got)
	}
	if got := counterValue(t, reg, "host_volume_bytes_transferred_total", "in"); got != 8 {
		t.Errorf("bytes in = %v, want 8", got)
	}
	if got := counterValue(t, reg, "host_volume_files_transferred_total", "in"); got != 2 {
		t.Errorf("files in = %v, want 2", got)
	}
	if got := histogramCount(t, reg, "host_volume_lease_wait_seconds"); got != 2 {
		t.Errorf("lease wait observations = %d, want 2", got)
	}
}

func TestS3ConfigFromEnv(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		in   objstore.S3Config
		want objstore.S3Config
	}{
		{"all from env", map[string]string{"AWS_ACCESS_KEY_ID": "ak", "AWS_SECRET_ACCESS_KEY": "sk", "AWS_REGION": "eu-west-1", "AWS_ENDPOINT_URL": "https://s3.example.com"},
			objstore.S3Config{Bucket: "b"}, objstore.S3Config{Endpoint: "s3.example.com", Bucket: "b", AccessKey: "ak", SecretKey: "sk", Region: "eu-west-1", Secure: true}},
		{"flags win", map[string]string{"AWS_ACCESS_KEY_ID": "ak", "AWS_SECRET_ACCESS_KEY": "sk", "AWS_ENDPOINT_URL": "https://env"},
			objstore.S3Config{Endpoint: "flag:9000", AccessKey: "fa", SecretKey: "fs"}, objstore.S3Config{Endpoint: "flag:9000", AccessKey: "fa", SecretKey: "fs"}},
		{"default region, plain http", map[string]string{"AWS_DEFAULT_REGION": "us-east-2", "AWS_ENDPOINT_URL": "http://127.0.0.1:7070/"},
			objstore.S3Config{Secure: true}, objstore.S3Config{Endpoint: "127.0.0.1:7070", Region: "us-east-2"}},
		{"service-specific endpoint wins", map[string]string{"AWS_ENDPOINT_URL": "http://general", "AWS_ENDPOINT_URL_S3": "https://s3only:443"},
			objstore.S3Config{}, objstore.S3Config{Endpoint: "s3only:443", Secure: true}},
		{"AWS_REGION over AWS_DEFAULT_REGION", map[string]string{"AWS_REGION": "r1", "AWS_DEFAULT_REGION": "r2"},
			objstore.S3Config{}, objstore.S3Config{Region: "r1"}},
		{"nothing set", nil, objstore.S3Config{}, objstore.S3Config{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"} {
				t.Setenv(k, c.env[k])
			}
			if got := objstore.S3ConfigFromEnv(c.in); got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestS3BadCredentialsFailAtOnce(t *testing.T) {
	cfg := s3test.Start(t)
	cfg.SecretKey = "wrong"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := objstore.NewS3Backend(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), "after 1 attempts") || !strings.Contains(err.Error(), "credentials") {
		t.Fatalf("NewS3Backend with a wrong secret: %v; want an error at the first attempt", err)
	}
	cfg.Bucket = "x"
	if _, err := objstore.NewS3Backend(ctx, cfg); err == nil || !strings.Contains(err.Error(), "--s3-bucket") {
		t.Fatalf("NewS3Backend with a bad bucket name: %v", err)
	}
}
