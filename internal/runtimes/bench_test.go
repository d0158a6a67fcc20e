package runtimes

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkNoop measures the per-run start cost of each runtime: a main that
// does nothing, from exec to result.json. Run with
//
//	go test ./internal/runtimes/ -run '^$' -bench Noop -benchtime 30x
func BenchmarkNoop(b *testing.B) {
	scripts := []struct{ name, file, src, path string }{
		{"python-usr-bin", "noop.py", "def main():\n    pass\n", "/usr/bin:" + os.Getenv("PATH")},
		{"python-PATH", "noop.py", "def main():\n    pass\n", os.Getenv("PATH")},
		{"bun-ts", "noop.ts", "export function main() {}\n", os.Getenv("PATH")},
		{"bash", "noop.sh", "echo null\n", os.Getenv("PATH")},
	}
	for _, s := range scripts {
		b.Run(s.name, func(b *testing.B) {
			dir := b.TempDir()
			script := filepath.Join(dir, s.file)
			ioDir := filepath.Join(dir, "io")
			if err := os.Mkdir(ioDir, 0o755); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(script, []byte(s.src), 0o644); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(ioDir, ArgsFile), []byte("{}"), 0o644); err != nil {
				b.Fatal(err)
			}
			kind, err := Detect(script)
			if err != nil {
				b.Fatal(err)
			}
			cmd, err := Build(kind, Paths{Script: script, ShimDir: testShimDir, IODir: ioDir}, []byte("{}"), nil)
			if err != nil {
				b.Fatal(err)
			}
			argv0, err := lookPathIn(cmd.Argv[0], s.path)
			if err != nil {
				b.Skip(err)
			}
			run := *cmd
			run.Argv = append([]string{argv0}, cmd.Argv[1:]...)
			run.Env = append(append(withoutEnv(os.Environ(), "PATH"), "PATH="+s.path), cmd.Env...)
			b.ResetTimer()
			for b.Loop() {
				code := benchRun(b, &run, dir)
				if _, err := Outcome(kind, openIO(b, ioDir), 1<<20, []byte("null"), code); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
