package objstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/agenthost/host/internal/objstore"
)

func TestVolumeInfosAndFiles(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		v := e.volumes(t)
		mountEdit(t, v, "proj", "job-1", func(d string) {
			writeTree(t, d, map[string]node{"a.txt": file(0o644, "hello"), "sub": dir(0o755), "sub/run.sh": file(0o755, "#!/bin/sh\n")})
		})
		mountEdit(t, v, "proj", "job-2", func(d string) {
			writeTree(t, d, map[string]node{"b.txt": file(0o600, "123")})
		})
		mountEdit(t, v, "other", "job-3", func(d string) { writeTree(t, d, map[string]node{"o": file(0o644, "o")}) })

		infos, err := v.Infos(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(infos) != 2 || infos[0].Name != "other" || infos[1].Name != "proj" {
			t.Fatalf("infos: %+v", infos)
		}
		p := infos[1]
		if p.Version != 2 || p.Versions != 2 || p.LastJob != "job-2" || p.Files != 4 || p.Bytes != 5+10+3 || p.Updated.IsZero() {
			t.Fatalf("proj: %+v", p)
		}
		if one, err := v.Info(ctx, "proj"); err != nil || one != p {
			t.Fatalf("Info: %+v, %v; want %+v", one, err, p)
		}

		cases := []struct {
			version uint64
			want    []objstore.FileInfo
		}{
			{0, []objstore.FileInfo{{Path: "a.txt", Type: "file", Mode: 0o644, Size: 5}, {Path: "b.txt", Type: "file", Mode: 0o600, Size: 3},
				{Path: "sub", Type: "dir", Mode: 0o755}, {Path: "sub/run.sh", Type: "file", Mode: 0o755, Size: 10}}},
			{1, []objstore.FileInfo{{Path: "a.txt", Type: "file", Mode: 0o644, Size: 5},
				{Path: "sub", Type: "dir", Mode: 0o755}, {Path: "sub/run.sh", Type: "file", Mode: 0o755, Size: 10}}},
		}
		for _, c := range cases {
			got, files, err := v.Files(ctx, "proj", c.version)
			if err != nil {
				t.Fatal(err)
			}
			if (c.version == 0 && got != 2) || (c.version != 0 && got != c.version) || len(files) != len(c.want) {
				t.Fatalf("version %d: listed version %d, files %+v", c.version, got, files)
			}
			for i := range files {
				if files[i] != c.want[i] {
					t.Errorf("version %d: file %d = %+v, want %+v", c.version, i, files[i], c.want[i])
				}
			}
		}
		if _, _, err := v.Files(ctx, "proj", 9); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("a version that is not kept: %v", err)
		}
		if _, err := v.Info(ctx, "nosuch"); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("an unknown volume: %v", err)
		}
	})
}
