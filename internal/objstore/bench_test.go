package objstore_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agenthost/host/internal/objstore"
)

// BenchmarkSync measures a volume of 1,000 files and 100 MB on each backend: the first commit,
// the first mount on a host with a cold cache, a rerun that changes nothing, and a rerun that
// changes one file. Run it alone:
//
//	go test -p 1 -run '^$' -bench BenchmarkSync -benchtime 1x ./internal/objstore/
func BenchmarkSync(b *testing.B) {
	const files, size = 1000, 100 * 1000
	for _, kind := range backendKinds {
		b.Run(kind, func(b *testing.B) {
			e := newEnv(b, kind)
			src := b.TempDir()
			rng := rand.NewChaCha8([32]byte{1})
			buf := make([]byte, size)
			for i := range files {
				p := filepath.Join(src, fmt.Sprintf("d%02d", i%20), fmt.Sprintf("f%04d", i))
				os.MkdirAll(filepath.Dir(p), 0o755)
				rng.Read(buf)
				if err := os.WriteFile(p, buf, 0o644); err != nil {
					b.Fatal(err)
				}
			}
			ctx := context.Background()
			big := func(o *objstore.Options) { o.CacheBytes = 1 << 30 }
			b.ResetTimer()
			for i := range b.N {
				name := fmt.Sprintf("bench%d", i)
				writer, reader := e.volumes(b, big), e.volumes(b, big)
				run := func(phase string, v *objstore.Volumes, edit func(dir string)) {
					b.StopTimer()
					d := filepath.Join(b.TempDir(), "vol")
					b.StartTimer()
					start := time.Now()
					m, err := v.Mount(ctx, name, d, phase)
					if err != nil {
						b.Fatal(err)
					}
					mounted := time.Since(start)
					b.StopTimer()
					edit(d)
					b.StartTimer()
					start = time.Now()
					res, err := m.Commit(ctx, phase)
					if err != nil {
						b.Fatal(err)
					}
					committed := time.Since(start)
					m.Release(ctx)
					in := m.In()
					b.Logf("%-8s %-22s in: %4d files %10d bytes %8s | out: %4d files %10d bytes %8s (version %d)",
						kind, phase, in.FilesFetched, in.BytesFetched, mounted.Round(time.Millisecond),
						res.Stats.FilesUploaded, res.Stats.BytesUploaded, committed.Round(time.Millisecond), res.Version)
				}
				run("first sync out", writer, func(d string) { copyTree(b, src, d) })
				run("first sync in (cold)", reader, func(string) {})
				run("rerun, nothing changed", reader, func(string) {})
				run("rerun, one file changed", reader, func(d string) {
					os.WriteFile(filepath.Join(d, "d07", "f0007"), []byte(fmt.Sprint("changed ", i)), 0o644)
				})
			}
		})
	}
}

func copyTree(t testing.TB, from, to string) {
	t.Helper()
	err := filepath.Walk(from, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if info.IsDir() {
			return os.MkdirAll(dst, info.Mode().Perm())
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, info.Mode().Perm())
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkCommitSmall measures what one commit of a small change costs on each backend: a
// volume of 10 small files, one of which each run changes. Past the tenth version every commit
// also collects the version that falls out of the history, as in steady use. Only Commit is
// timed. It is what the head markers add to (one small object written per commit, one deleted
// with each collected version); compare against the commit before them:
//
//	go test -p 1 -run '^$' -bench BenchmarkCommitSmall -benchtime 200x -count 5 ./internal/objstore/
func BenchmarkCommitSmall(b *testing.B) {
	for _, kind := range backendKinds {
		b.Run(kind, func(b *testing.B) {
			e := newEnv(b, kind)
			v := e.volumes(b)
			ctx := context.Background()
			const name = "small"
			mountEdit(b, v, name, "seed", func(d string) {
				for i := range 10 {
					os.WriteFile(filepath.Join(d, fmt.Sprintf("f%d", i)), []byte(fmt.Sprint("content ", i)), 0o644)
				}
			})
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				d := filepath.Join(b.TempDir(), "vol")
				m, err := v.Mount(ctx, name, d, "bench")
				if err != nil {
					b.Fatal(err)
				}
				os.WriteFile(filepath.Join(d, "f3"), []byte(fmt.Sprint("changed ", i)), 0o644)
				b.StartTimer()
				if _, err := m.Commit(ctx, "bench"); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				m.Release(ctx)
				b.StartTimer()
			}
		})
	}
}
