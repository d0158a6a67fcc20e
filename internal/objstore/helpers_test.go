package objstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/host/internal/objstore"
	"github.com/agenthost/host/internal/testkit/natstest"
	"github.com/agenthost/host/internal/testkit/s3test"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

var backendKinds = []string{"jetstream", "s3"}

// env is one NATS server (for the KeyValue buckets) and one Backend of a kind.
type env struct {
	kind string
	js   jetstream.JetStream
	b    objstore.Backend
	s3   objstore.S3Config // the S3 store's, for kind "s3"
}

func newEnv(t testing.TB, kind string) *env {
	t.Helper()
	ctx := context.Background()
	_, js := natstest.Start(t)
	e := &env{kind: kind, js: js}
	var err error
	switch kind {
	case "jetstream":
		e.b, err = objstore.NewJetStreamBackend(ctx, js, "", 1)
	case "s3":
		e.s3 = s3test.Start(t)
		e.b, err = objstore.NewS3Backend(ctx, e.s3)
	}
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// forEachBackend runs a test against each backend in its own environment.
func forEachBackend(t *testing.T, fn func(t *testing.T, e *env)) {
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) { fn(t, newEnv(t, kind)) })
	}
}

// volumes opens Volumes over e with a fresh cache directory: each call is another host.
func (e *env) volumes(t testing.TB, opts ...func(*objstore.Options)) *objstore.Volumes {
	return e.volumesOn(t, e.b, opts...)
}

func (e *env) volumesOn(t testing.TB, b objstore.Backend, opts ...func(*objstore.Options)) *objstore.Volumes {
	t.Helper()
	o := objstore.Options{CacheDir: t.TempDir(), Log: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), RetryFor: 5 * time.Second}
	for _, f := range opts {
		f(&o)
	}
	v, err := objstore.New(context.Background(), e.js, b, o)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// node is what a test expects at one path.
type node struct {
	typ     string // "file", "dir", "symlink"
	mode    fs.FileMode
	content string
	target  string
}

func file(mode fs.FileMode, content string) node {
	return node{typ: "file", mode: mode, content: content}
}
func dir(mode fs.FileMode) node { return node{typ: "dir", mode: mode} }
func link(target string) node   { return node{typ: "symlink", target: target} }

// writeTree creates the nodes under root, parents first.
func writeTree(t testing.TB, root string, tree map[string]node) {
	t.Helper()
	paths := make([]string, 0, len(tree))
	for p := range tree {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var dirs []string
	for _, p := range paths {
		n, full := tree[p], filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch n.typ {
		case "file":
			os.Remove(full)
			if err = os.WriteFile(full, []byte(n.content), 0o600); err == nil {
				err = os.Chmod(full, n.mode)
			}
		case "dir":
			err = os.MkdirAll(full, 0o755)
			dirs = append(dirs, p)
		case "symlink":
			os.Remove(full)
			err = os.Symlink(n.target, full)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Chmod(filepath.Join(root, dirs[i]), tree[dirs[i]].mode); err != nil {
			t.Fatal(err)
		}
	}
}

// readTree reads everything under root without following symlinks.
func readTree(t testing.TB, root string) map[string]node {
	t.Helper()
	tree := map[string]node{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case info.IsDir():
			tree[rel] = dir(info.Mode().Perm())
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			tree[rel] = file(info.Mode().Perm(), string(b))
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			tree[rel] = link(target)
		default:
			tree[rel] = node{typ: info.Mode().Type().String()}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

func diffTrees(t testing.TB, want, got map[string]node) {
	t.Helper()
	for p, w := range want {
		g, ok := got[p]
		if !ok {
			t.Errorf("%s: missing", p)
		} else if g != w {
			t.Errorf("%s: got %+v, want %+v", p, g, w)
		}
	}
	for p, g := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s: unexpected %+v", p, g)
		}
	}
}

// mountEdit mounts a volume into a fresh directory, lets edit change it, commits and releases.
func mountEdit(t testing.TB, v *objstore.Volumes, name, job string, edit func(dir string)) objstore.CommitResult {
	t.Helper()
	ctx := context.Background()
	d := filepath.Join(t.TempDir(), "vol")
	m, err := v.Mount(ctx, name, d, job)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release(ctx)
	edit(d)
	res, err := m.Commit(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// checkout mounts a volume into a fresh directory, releases it, and returns what it held.
func checkout(t testing.TB, v *objstore.Volumes, name string) (map[string]node, objstore.SyncStats) {
	t.Helper()
	ctx := context.Background()
	d := filepath.Join(t.TempDir(), "vol")
	m, err := v.Mount(ctx, name, d, "reader")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Release(ctx); err != nil {
		t.Fatal(err)
	}
	return readTree(t, d), m.In()
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// storedKeys lists the volume's objects by kind: blob hashes and manifest keys.
func storedKeys(t testing.TB, b objstore.Backend, name string) (blobs map[string]bool, manifests []string) {
	t.Helper()
	keys, err := b.List(context.Background(), "volumes/"+name+"/")
	if err != nil {
		t.Fatal(err)
	}
	blobs = map[string]bool{}
	for _, k := range keys {
		rest := strings.TrimPrefix(k, "volumes/"+name+"/")
		switch {
		case strings.HasPrefix(rest, "blobs/"):
			blobs[strings.TrimPrefix(rest, "blobs/")] = true
		case strings.HasPrefix(rest, "manifests/"):
			manifests = append(manifests, rest)
		default:
			t.Errorf("unexpected object %s", k)
		}
	}
	return blobs, manifests
}

func hashSet(contents ...string) map[string]bool {
	m := map[string]bool{}
	for _, c := range contents {
		if c != "" {
			m[sha(c)] = true
		}
	}
	return m
}

func equalSets(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

var errDown = errors.New("connection refused (simulated outage)")

// flaky is a Backend that fails on demand, for outages and crashes mid-commit.
type flaky struct {
	objstore.Backend
	mu       sync.Mutex
	putsLeft int // puts that still succeed; -1 = all
	getsDown bool
	// failPrefix, when set, fails every put of a key starting with it (and only those).
	failPrefix string
	calls      int
}

func (f *flaky) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	f.mu.Lock()
	f.calls++
	if f.failPrefix != "" && strings.HasPrefix(key, f.failPrefix) {
		f.mu.Unlock()
		return errDown
	}
	if f.putsLeft == 0 {
		f.mu.Unlock()
		return errDown
	}
	if f.putsLeft > 0 {
		f.putsLeft--
	}
	f.mu.Unlock()
	return f.Backend.Put(ctx, key, r, size)
}

func (f *flaky) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	f.mu.Lock()
	f.calls++
	down := f.getsDown
	f.mu.Unlock()
	if down {
		return nil, errDown
	}
	return f.Backend.Get(ctx, key)
}

func (f *flaky) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}
