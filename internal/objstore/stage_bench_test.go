package objstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/host/internal/objstore"
)

// BenchmarkStage measures what staging (approve: ... stage) adds to a commit, side by side in
// one run on each backend: on a small volume (10 small files) and a 100 MB one (100 files of
// 1 MB), each iteration changes one file and commits it, then changes it again and stages it
// and promotes the staged version (as approve does). Mounts are not timed. It reports the p50
// of each, in milliseconds:
//
//	go test -p 1 -run '^$' -bench BenchmarkStage -benchtime 20x ./internal/objstore/
func BenchmarkStage(b *testing.B) {
	sizes := []struct {
		name        string
		files, size int
	}{{"small", 10, 100}, {"100MB", 100, 1 << 20}}
	for _, kind := range backendKinds {
		for _, sz := range sizes {
			b.Run(kind+"/"+sz.name, func(b *testing.B) {
				e := newEnv(b, kind)
				v := e.volumes(b, func(o *objstore.Options) { o.CacheBytes = 1 << 30 })
				ctx := context.Background()
				const name = "bench"
				rng := rand.NewChaCha8([32]byte{2})
				buf := make([]byte, sz.size)
				mountEdit(b, v, name, "seed", func(d string) {
					for i := range sz.files {
						rng.Read(buf)
						if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%03d", i)), buf, 0o644); err != nil {
							b.Fatal(err)
						}
					}
				})
				var commit, stage, promote, both []time.Duration
				mount := func(i int, job string) *objstore.Mounted {
					d := filepath.Join(b.TempDir(), "vol")
					m, err := v.Mount(ctx, name, d, job)
					if err != nil {
						b.Fatal(err)
					}
					os.WriteFile(filepath.Join(d, "f003"), []byte(fmt.Sprint(job, i)), 0o644)
					// A mount may have just copied 100 MB out of the cache (the staged run's
					// checkout is never kept warm): its writeback must not land in the timing.
					syscall.Sync()
					return m
				}
				b.ResetTimer()
				for i := range b.N {
					b.StopTimer() // mounts are not measured; the p50s below are the result
					m := mount(i, "commit")
					t0 := time.Now()
					if _, err := m.Commit(ctx, "commit"); err != nil {
						b.Fatal(err)
					}
					commit = append(commit, time.Since(t0))
					m.Release(ctx)

					m = mount(i, "stage")
					t0 = time.Now()
					res, err := m.Stage(ctx, "stage", 50)
					if err != nil || !res.Staged {
						b.Fatal(res, err)
					}
					staged := time.Since(t0)
					m.Release(ctx)
					t1 := time.Now()
					if err := v.Promote(ctx, res.Ref, "approve"); err != nil {
						b.Fatal(err)
					}
					promoted := time.Since(t1)
					stage, promote, both = append(stage, staged), append(promote, promoted), append(both, staged+promoted)
				}
				b.StopTimer()
				for _, r := range []struct {
					unit string
					d    []time.Duration
				}{{"commit-p50-ms", commit}, {"stage-p50-ms", stage}, {"promote-p50-ms", promote}, {"stage+promote-p50-ms", both}} {
					b.ReportMetric(p50ms(r.d), r.unit)
				}
			})
		}
	}
}

func p50ms(d []time.Duration) float64 {
	slices.Sort(d)
	return float64(d[len(d)/2].Microseconds()) / 1000
}
