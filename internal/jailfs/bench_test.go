package jailfs

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkMountTree is what a bounded /job adds to a cold job: mount its tmpfs, and unmount it
// at the end (which also frees what was written there, at once). Compare it with a plain
// directory made and removed, which is what it replaces.
func BenchmarkMountTree(b *testing.B) {
	if err := CanMount(b.TempDir()); err != nil {
		b.Skipf("SKIPPED: cannot mount here: %v", err)
	}
	for _, c := range []struct {
		name  string
		files int
	}{{"empty", 0}, {"100 files", 100}} {
		b.Run("tmpfs/"+c.name, func(b *testing.B) {
			dir := filepath.Join(b.TempDir(), "job")
			for b.Loop() {
				if err := os.Mkdir(dir, 0o700); err != nil {
					b.Fatal(err)
				}
				t, err := MountTree(dir, 64<<20, 0, 0)
				if err != nil {
					b.Fatal(err)
				}
				writeFiles(b, dir, c.files)
				if err := t.Close(); err != nil {
					b.Fatal(err)
				}
				if err := os.Remove(dir); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("plain/"+c.name, func(b *testing.B) {
			dir := filepath.Join(b.TempDir(), "job")
			for b.Loop() {
				if err := os.Mkdir(dir, 0o700); err != nil {
					b.Fatal(err)
				}
				writeFiles(b, dir, c.files)
				if err := os.RemoveAll(dir); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func writeFiles(b *testing.B, dir string, n int) {
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, "f"+string(rune('a'+i%26))+string(rune('a'+i/26))), []byte("some content"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}
