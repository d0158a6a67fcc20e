package objstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/host/internal/objstore"
)

func TestRoundTrip(t *testing.T) {
	passwd, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Skip("no /etc/passwd on this machine")
	}
	passwdInfo, _ := os.Stat("/etc/passwd")
	forEachBackend(t, func(t *testing.T, e *env) {
		tree := map[string]node{
			"bin":           dir(0o755),
			"bin/run.sh":    file(0o755, "#!/bin/sh\necho hi\n"),
			"secret":        file(0o600, "s3cr3t"),
			"readonly.txt":  file(0o444, "do not touch"),
			"empty":         file(0o644, ""),
			"emptydir":      dir(0o700),
			"deep":          dir(0o755),
			"deep/a":        dir(0o755),
			"deep/a/b":      dir(0o750),
			"deep/a/b/c.md": file(0o640, "deep content"),
			"rodir":         dir(0o555),
			"rodir/inside":  file(0o644, "in a read-only dir"),
			"dup1":          file(0o644, "same"),
			"dup2":          file(0o600, "same"),
			"to-c":          link("deep/a/b/c.md"),
			"to-passwd":     link("/etc/passwd"),
			"dangling":      link("no/such/file"),
			"to-dir":        link("deep"),
			"space name ü":  file(0o644, "unicode name"),
		}
		v := e.volumes(t)
		res := mountEdit(t, v, "rt", "job-1", func(d string) {
			writeTree(t, d, tree)
			if err := syscall.Mkfifo(filepath.Join(d, "fifo"), 0o644); err != nil {
				t.Fatal(err)
			}
		})
		if !res.Changed || res.Version != 1 || res.FilesChanged != len(tree) {
			t.Fatalf("commit = %+v, want version 1 with %d changes", res, len(tree))
		}
		// Another host (an empty cache) gets everything back; the FIFO was skipped.
		got, in := checkout(t, e.volumes(t), "rt")
		diffTrees(t, tree, got)
		if in.Files != len(tree) || in.FilesFetched == 0 {
			t.Errorf("sync-in stats %+v", in)
		}
		// The link to /etc/passwd was never followed: not overwritten, not uploaded.
		now, _ := os.ReadFile("/etc/passwd")
		nowInfo, _ := os.Stat("/etc/passwd")
		if string(now) != string(passwd) || !nowInfo.ModTime().Equal(passwdInfo.ModTime()) {
			t.Error("/etc/passwd changed")
		}
		blobs, _ := storedKeys(t, e.b, "rt")
		if blobs[sha(string(passwd))] {
			t.Error("the content of /etc/passwd was uploaded")
		}
		want := hashSet("#!/bin/sh\necho hi\n", "s3cr3t", "do not touch", "deep content", "in a read-only dir", "same", "unicode name")
		if !equalSets(blobs, want) {
			t.Errorf("stored blobs %v, want %v (one per distinct non-empty content)", blobs, want)
		}
	})
}

func TestOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	e := newEnv(t, "jetstream")
	mountEdit(t, e.volumes(t), "owned", "job", func(d string) {
		writeTree(t, d, map[string]node{"d": dir(0o755), "d/f": file(0o644, "x"), "l": link("d/f"), "e": file(0o600, "")})
	})
	v := e.volumes(t, func(o *objstore.Options) { o.Owner = &objstore.Owner{UID: 12345, GID: 23456} })
	d := filepath.Join(t.TempDir(), "vol")
	m, err := v.Mount(context.Background(), "owned", d, "job")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release(context.Background())
	for _, p := range []string{"", "d", "d/f", "l", "e"} {
		info, err := os.Lstat(filepath.Join(d, p))
		if err != nil {
			t.Fatal(err)
		}
		st := info.Sys().(*syscall.Stat_t)
		if st.Uid != 12345 || st.Gid != 23456 {
			t.Errorf("%q owned by %d:%d, want 12345:23456", p, st.Uid, st.Gid)
		}
	}
}

func TestSameSizeEditSyncs(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		v := e.volumes(t)
		mountEdit(t, v, "edit", "job-1", func(d string) { writeTree(t, d, map[string]node{"f": file(0o644, "aaaa")}) })
		res := mountEdit(t, v, "edit", "job-2", func(d string) {
			p := filepath.Join(d, "f")
			info, _ := os.Stat(p)
			if err := os.WriteFile(p, []byte("bbbb"), 0o644); err != nil {
				t.Fatal(err)
			}
			// Same size, same mtime: only the content hash can tell.
			if err := os.Chtimes(p, info.ModTime(), info.ModTime()); err != nil {
				t.Fatal(err)
			}
		})
		if !res.Changed || res.Stats.FilesUploaded != 1 || res.FilesChanged != 1 {
			t.Fatalf("commit = %+v, want one changed and uploaded file", res)
		}
		got, _ := checkout(t, e.volumes(t), "edit")
		if got["f"].content != "bbbb" {
			t.Errorf("f = %q, want bbbb", got["f"].content)
		}
	})
}

func TestIncremental(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		v := e.volumes(t)
		tree := map[string]node{}
		for i := range 20 {
			tree[fmt.Sprintf("f%02d", i)] = file(0o644, strings.Repeat(fmt.Sprint(i), 100))
		}
		mountEdit(t, v, "inc", "job-1", func(d string) { writeTree(t, d, tree) })

		// A rerun on the same host with nothing changed moves nothing and makes no version.
		ctx := context.Background()
		d := filepath.Join(t.TempDir(), "vol")
		m, err := v.Mount(ctx, "inc", d, "job-2")
		if err != nil {
			t.Fatal(err)
		}
		if in := m.In(); in.FilesFetched != 0 || in.BytesFetched != 0 || in.Files != 20 {
			t.Errorf("second mount on the same host: %+v, want nothing fetched", in)
		}
		res, err := m.Commit(ctx, "job-2")
		if err != nil {
			t.Fatal(err)
		}
		if res.Changed || res.Version != 1 || res.Stats.FilesUploaded != 0 || res.Stats.BytesUploaded != 0 {
			t.Errorf("unchanged commit = %+v, want no version and nothing uploaded", res)
		}
		// One changed file uploads that file alone.
		if err := os.WriteFile(filepath.Join(d, "f07"), []byte("changed"), 0o644); err != nil {
			t.Fatal(err)
		}
		res, err = m.Commit(ctx, "job-2")
		if err != nil {
			t.Fatal(err)
		}
		if !res.Changed || res.Version != 2 || res.FilesChanged != 1 || res.Stats.FilesUploaded != 1 || res.Stats.BytesUploaded != int64(len("changed")) {
			t.Errorf("commit of one change = %+v, want version 2, 1 file and 7 bytes uploaded", res)
		}
		if m.Version() != 2 {
			t.Errorf("Version() = %d after commit, want 2", m.Version())
		}
		if err := m.Release(ctx); err != nil {
			t.Fatal(err)
		}
		hist, err := v.History(ctx, "inc")
		if err != nil || len(hist) != 2 || hist[1].FilesChanged != 1 || hist[1].JobID != "job-2" || hist[1].Files != 20 || hist[1].Bytes != 7 {
			t.Errorf("history = %+v, %v", hist, err)
		}
		// The host that committed version 2 has its content cached already.
		if _, in := checkout(t, v, "inc"); in.FilesFetched != 0 {
			t.Errorf("mount after own commit fetched %d files, want 0", in.FilesFetched)
		}
	})
}

func TestCache(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		tree := map[string]node{}
		for i := range 8 {
			tree[fmt.Sprintf("f%d", i)] = file(0o644, strings.Repeat(string(rune('a'+i)), 1000))
		}
		mountEdit(t, e.volumes(t), "cached", "job-1", func(d string) { writeTree(t, d, tree) })

		t.Run("second mount downloads nothing", func(t *testing.T) {
			v := e.volumes(t)
			_, in := checkout(t, v, "cached")
			if in.FilesFetched != 8 || in.BytesFetched != 8000 {
				t.Errorf("first mount on a new host: %+v, want 8 files, 8000 bytes", in)
			}
			got, in := checkout(t, v, "cached")
			if in.FilesFetched != 0 || in.BytesFetched != 0 {
				t.Errorf("second mount: %+v, want nothing fetched", in)
			}
			diffTrees(t, tree, got)
		})
		t.Run("eviction", func(t *testing.T) {
			cacheDir := t.TempDir()
			v := e.volumes(t, func(o *objstore.Options) { o.CacheDir, o.CacheBytes = cacheDir, 2500 })
			_, in := checkout(t, v, "cached")
			if in.FilesFetched != 8 {
				t.Errorf("first mount: %+v", in)
			}
			if n := dirBytes(t, filepath.Join(cacheDir, "blobs")); n > 2500 {
				t.Errorf("cache holds %d bytes, over its 2500-byte bound", n)
			}
			// What was evicted is downloaded again, and only that.
			got, in := checkout(t, v, "cached")
			if in.FilesFetched == 0 || in.FilesFetched == 8 {
				t.Errorf("second mount fetched %d files, want those evicted (some, not all)", in.FilesFetched)
			}
			diffTrees(t, tree, got)
			// A restarted host keeps its bound and what it cached.
			v2 := e.volumes(t, func(o *objstore.Options) { o.CacheDir, o.CacheBytes = cacheDir, 2500 })
			if _, in := checkout(t, v2, "cached"); in.FilesFetched == 8 {
				t.Errorf("a restarted host fetched everything again")
			}
		})
		t.Run("damaged cache file is fetched again", func(t *testing.T) {
			cacheDir := t.TempDir()
			v := e.volumes(t, func(o *objstore.Options) { o.CacheDir = cacheDir })
			checkout(t, v, "cached")
			if err := os.WriteFile(filepath.Join(cacheDir, "blobs", sha(tree["f3"].content)), []byte("garbage"), 0o600); err != nil {
				t.Fatal(err)
			}
			got, in := checkout(t, v, "cached")
			if in.FilesFetched != 1 {
				t.Errorf("fetched %d files, want the damaged one", in.FilesFetched)
			}
			diffTrees(t, tree, got)
		})
	})
}

func dirBytes(t testing.TB, dir string) int64 {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, de := range des {
		info, err := de.Info()
		if err == nil {
			n += info.Size()
		}
	}
	return n
}

func TestLimits(t *testing.T) {
	cases := []struct {
		name  string
		opts  func(*objstore.Options)
		tree  map[string]node
		flag  string
		count string
	}{
		{"bytes", func(o *objstore.Options) { o.MaxBytes = 1000 },
			map[string]node{"small": file(0o644, "x"), "big": file(0o644, strings.Repeat("b", 2000))}, "--volume-max-bytes", "1000"},
		{"files", func(o *objstore.Options) { o.MaxFiles = 3 },
			map[string]node{"a": file(0o644, "a"), "b": file(0o644, "b"), "d": dir(0o755), "d/c": file(0o644, "c")}, "--volume-max-files", "3"},
	}
	forEachBackend(t, func(t *testing.T, e *env) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				name := "limit-" + c.name
				mountEdit(t, e.volumes(t), name, "job-1", func(d string) { writeTree(t, d, map[string]node{"keep": file(0o644, "v1")}) })
				blobsBefore, _ := storedKeys(t, e.b, name)
				ctx := context.Background()
				v := e.volumes(t, c.opts)
				d := filepath.Join(t.TempDir(), "vol")
				m, err := v.Mount(ctx, name, d, "job-2")
				if err != nil {
					t.Fatal(err)
				}
				defer m.Release(ctx)
				writeTree(t, d, c.tree)
				_, err = m.Commit(ctx, "job-2")
				if !errors.Is(err, objstore.ErrLimit) || !strings.Contains(err.Error(), c.flag) || !strings.Contains(err.Error(), c.count) || !strings.Contains(err.Error(), "nothing was committed") {
					t.Fatalf("commit over the limit: %v; want ErrLimit naming %s and %s", err, c.flag, c.count)
				}
				if hist, _ := v.History(ctx, name); len(hist) != 1 || m.Version() != 1 {
					t.Errorf("history after a failed commit: %+v", hist)
				}
				if blobs, _ := storedKeys(t, e.b, name); !equalSets(blobs, blobsBefore) {
					t.Errorf("blobs changed by a refused commit: %v, were %v", blobs, blobsBefore)
				}
			})
		}
	})
}

func TestStoreDown(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		mountEdit(t, e.volumes(t), "down", "job-1", func(d string) { writeTree(t, d, map[string]node{"f": file(0o644, "v1")}) })
		short := func(o *objstore.Options) { o.RetryFor = 300 * time.Millisecond }

		t.Run("mount", func(t *testing.T) {
			fb := &flaky{Backend: e.b, putsLeft: -1, getsDown: true}
			v := e.volumesOn(t, fb, short)
			_, err := v.Mount(ctx, "down", filepath.Join(t.TempDir(), "vol"), "job-2")
			if err == nil || !errors.Is(err, errDown) || !strings.Contains(err.Error(), e.b.Name()) || !strings.Contains(err.Error(), "gave up after") {
				t.Fatalf("mount with the store down: %v; want a clear error naming the store", err)
			}
			if fb.callCount() < 2 {
				t.Errorf("the store was tried %d times, want retries", fb.callCount())
			}
			// The failed mount released its lease: the next one does not wait.
			if got, _ := checkout(t, e.volumes(t), "down"); got["f"].content != "v1" {
				t.Errorf("after the outage f = %q", got["f"].content)
			}
		})
		t.Run("commit", func(t *testing.T) {
			fb := &flaky{Backend: e.b, putsLeft: 0}
			v := e.volumesOn(t, fb, short)
			d := filepath.Join(t.TempDir(), "vol")
			m, err := v.Mount(ctx, "down", d, "job-3")
			if err != nil {
				t.Fatal(err)
			}
			defer m.Release(ctx)
			writeTree(t, d, map[string]node{"f": file(0o644, "v2")})
			_, err = m.Commit(ctx, "job-3")
			if err == nil || !errors.Is(err, errDown) || !strings.Contains(err.Error(), "nothing was committed") || !strings.Contains(err.Error(), "volumes/down/") {
				t.Fatalf("commit with the store down: %v", err)
			}
			if hist, _ := v.History(ctx, "down"); len(hist) != 1 {
				t.Errorf("history after a failed commit: %+v", hist)
			}
		})
	})
	t.Run("s3 endpoint unreachable", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := objstore.NewS3Backend(ctx, objstore.S3Config{Endpoint: "127.0.0.1:1", Bucket: "volumes", AccessKey: "a", SecretKey: "s"})
		if err == nil || !strings.Contains(err.Error(), "s3:127.0.0.1:1/volumes") || !strings.Contains(err.Error(), "connection refused") {
			t.Fatalf("NewS3Backend on a closed port: %v", err)
		}
	})
}

func TestCrashMidCommit(t *testing.T) {
	v1 := map[string]node{}
	for i := range 5 {
		v1[fmt.Sprintf("f%d", i)] = file(0o644, fmt.Sprintf("version one %d", i))
	}
	for _, putsOK := range []int{0, 2, 5} { // 5: every blob stored, the manifest not
		t.Run(fmt.Sprintf("after %d puts", putsOK), func(t *testing.T) {
			e := newEnv(t, "jetstream")
			if putsOK == 2 {
				// One case against S3 as well keeps the suite short.
				e = newEnv(t, "s3")
			}
			ctx := context.Background()
			mountEdit(t, e.volumes(t), "crash", "job-1", func(d string) { writeTree(t, d, v1) })

			fb := &flaky{Backend: e.b, putsLeft: putsOK}
			bad := e.volumesOn(t, fb, func(o *objstore.Options) { o.RetryFor = 200 * time.Millisecond })
			d := filepath.Join(t.TempDir(), "vol")
			m, err := bad.Mount(ctx, "crash", d, "job-2")
			if err != nil {
				t.Fatal(err)
			}
			for i := range 5 {
				os.WriteFile(filepath.Join(d, fmt.Sprintf("f%d", i)), []byte(fmt.Sprintf("crashed %d", i)), 0o644)
			}
			if _, err := m.Commit(ctx, "job-2"); err == nil {
				t.Fatal("commit through a failing store succeeded")
			}
			m.Release(ctx)

			// The previous version is current and whole.
			got, _ := checkout(t, e.volumes(t), "crash")
			diffTrees(t, v1, got)
			// The next commit works, and sweeps what the failed one left.
			res := mountEdit(t, e.volumes(t), "crash", "job-3", func(d string) {
				os.WriteFile(filepath.Join(d, "f0"), []byte("version two"), 0o644)
			})
			if res.Version != 2 {
				t.Fatalf("next commit = %+v", res)
			}
			blobs, manifests := storedKeys(t, e.b, "crash")
			want := hashSet("version two", "version one 0", "version one 1", "version one 2", "version one 3", "version one 4")
			if !equalSets(blobs, want) || len(manifests) != 2 {
				t.Errorf("after the next commit: blobs %v, manifests %v; want only what versions 1 and 2 use", blobs, manifests)
			}
		})
	}
}

func TestGarbageCollection(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		v := e.volumes(t, func(o *objstore.Options) { o.KeepVersions = 3 })
		for i := 1; i <= 5; i++ {
			mountEdit(t, v, "gc", fmt.Sprintf("job-%d", i), func(d string) {
				writeTree(t, d, map[string]node{"const": file(0o644, "constant"), "f": file(0o644, fmt.Sprintf("content %d", i))})
			})
		}
		hist, err := v.History(context.Background(), "gc")
		if err != nil {
			t.Fatal(err)
		}
		if len(hist) != 3 || hist[0].Version != 3 || hist[2].Version != 5 {
			t.Fatalf("history = %+v, want versions 3 to 5", hist)
		}
		blobs, manifests := storedKeys(t, e.b, "gc")
		if want := hashSet("constant", "content 3", "content 4", "content 5"); !equalSets(blobs, want) {
			t.Errorf("blobs = %v, want %v", blobs, want)
		}
		if len(manifests) != 3 {
			t.Errorf("manifests = %v, want 3", manifests)
		}
		for _, old := range []uint64{1, 2} {
			if err := v.Get(context.Background(), "gc", old, "f", &strings.Builder{}); !errors.Is(err, objstore.ErrNotFound) {
				t.Errorf("get of collected version %d: %v, want ErrNotFound", old, err)
			}
		}
	})
}
