package system_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/jobs"
	"github.com/agenthost/host/internal/testkit/hosttest"
)

// hostFile is what a file of the host's looks like from outside: every part a hostile job
// could change through a host that follows its links.
type hostFile struct {
	content        string
	mode           fs.FileMode
	uid, gid       uint32
	nlink          uint64
	isDir, present bool
}

// snapshotTree records every entry under dir.
func snapshotTree(t *testing.T, dir string) map[string]hostFile {
	t.Helper()
	out := map[string]hostFile{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		f := hostFile{mode: info.Mode(), uid: st.Uid, gid: st.Gid, nlink: uint64(st.Nlink), isDir: info.IsDir(), present: true}
		if info.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			f.content = string(b)
		}
		out[p] = f
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAttacksOnTheHostBoundary are the red team's attacks on what the host, as root and outside
// the jail, does with the job's tree: links planted on a volume's path (from main, and from a
// warm jail's top-level code before its job is handed over), links, fifos and devices at the
// io files, and a job that fills its disk. After each the host's files are as they were, the
// job failed for good with an error naming the path and the rule, and the host serves the next
// call.
func TestAttacksOnTheHostBoundary(t *testing.T) {
	hosttest.RequireBwrap(t)
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: the host-boundary attacks need a host running as root, as in production and CI (.ci/run runs as root)")
	}
	secret, err := os.MkdirTemp("", "host-secret-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(secret) })
	// Root-only, as /root or the host's data directory would be; b/ is where `volume: v a/b`
	// lands once a/ is a link to secret.
	for _, f := range []struct {
		path, content string
		mode          fs.FileMode
	}{
		{"nats-auth.json", `{"user":"hosts","password":"hosts-password-123"}`, 0o600},
		{"b/keep.txt", "root's file", 0o600},
	} {
		p := filepath.Join(secret, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.content), f.mode); err != nil {
			t.Fatal(err)
		}
	}
	secretFile := filepath.Join(secret, "nats-auth.json")

	files := map[string]string{
		"hello.py": helloPy,
		// Fills the volumes that the checkout attacks then try to write through a link.
		"fill.sh": `# sandbox
# volume: boundary-$args[v] a/b
echo from-the-volume > /job/a/b/planted.txt
echo '"filled"'`,
		// A link in the volume's parent, made by main: the commit must not scan (and commit),
		// nor the stash move away, the host directory the link names.
		"commitparent.sh": fmt.Sprintf(`# sandbox
# retries: 2
# volume: boundary-commit a/b
echo mine > /job/a/b/mine.txt
rm -rf /job/a && ln -s %s /job/a
echo '"planted"'`, secret),
		// The volume's own directory swapped for a link.
		"commitself.sh": fmt.Sprintf(`# sandbox
# volume: boundary-self v
rm -rf /job/v && ln -s %s /job/v
echo '"planted"'`, secret),
		// A link planted by top-level code, which a warm jail runs before its job is handed
		// over: the checkout must not write the volume through it. (Run cold, the link comes
		// after the checkout, and the commit finds it.)
		"checkout.py": fmt.Sprintf(`# sandbox
# volume: boundary-checkout a/b
import os, shutil
shutil.rmtree("/job/a", ignore_errors=True)
os.symlink(%q, "/job/a")
def main():
    return "planted"
`, secret),
		"resultlink.py": fmt.Sprintf(`# sandbox
import os
def main():
    os.symlink(%q, "/host/io/result.json")
    os._exit(0)
`, secretFile),
		"errorlink.py": fmt.Sprintf(`# sandbox
import os
def main():
    os.symlink(%q, "/host/io/error.json")
    os._exit(1)
`, secretFile),
		"resultfifo.py": `# sandbox
import os
def main():
    os.mkfifo("/host/io/result.json")
    os._exit(0)
`,
		"resultzero.py": `# sandbox
import os
def main():
    os.symlink("/dev/zero", "/host/io/result.json")
    os._exit(0)
`,
		"fallocate.sh": `# sandbox
fallocate -l 3G /job/big && echo '"allocated"'`,
		// Package manifests that reach beyond the function: refused at load, before any
		// installer (which once ran as root, hard-linking and chmodding what file: named)
		// sees them.
		"pkgfile/main.ts":         "// sandbox\nexport function main() { return 1 }\n",
		"pkgfile/package.json":    fmt.Sprintf("{\n  \"dependencies\": {\n    \"x\": \"file:%s/b\"\n  }\n}\n", secret),
		"pkgreq/main.py":          "# sandbox\ndef main():\n    return 1\n",
		"pkgreq/requirements.txt": fmt.Sprintf("requests\n-r %s\n-c %s\n", secretFile, secretFile),
		"diskfill.py": `# sandbox
# disk: 32Mi
def main():
    with open("/job/fill", "wb") as f:
        while True:
            f.write(b"x" * (1 << 20))
`,
	}

	// failsForGood expects a terminal failure, on the first attempt, mentioning every substring.
	type attack struct {
		fn, payload string
		wants       []string
	}
	attacks := []attack{
		{"commitparent", `{}`, []string{"a/b", "link"}},
		{"commitself", `{}`, []string{"volume directory v", "link"}},
		{"checkout", `{}`, []string{"a/b", "link"}},
		{"resultlink", `{}`, []string{"result.json", "symbolic link"}},
		{"errorlink", `{}`, []string{"error.json", "symbolic link"}},
		{"resultfifo", `{}`, []string{"result.json", "fifo"}},
		{"resultzero", `{}`, []string{"result.json", "symbolic link"}},
		{"fallocate", `{}`, []string{"disk:", "2Gi", "No space left on device"}},
		{"diskfill", `{}`, []string{"disk:", "/job is full", "32Mi"}},
	}
	for _, mode := range []struct {
		name string
		warm int
		fork bool
	}{{"warm", 1, false}, {"cold", -1, false}, {"fork", 1, true}} {
		t.Run(mode.name, func(t *testing.T) {
			h := hosttest.New(t, files, func(c *app.Config) { c.Warm, c.Fork = mode.warm, mode.fork })
			if mode.fork {
				waitTemplates(t, h, files)
			}
			// The checkout attack needs a volume with a version to write through the link.
			if got := string(h.Call("fill", `{"v":"checkout"}`).Data); got != `"filled"` {
				t.Fatalf("fill: %s", got)
			}
			before := snapshotTree(t, secret)
			for _, a := range attacks {
				t.Run(a.fn, func(t *testing.T) {
					reply := h.Call(a.fn, a.payload)
					if reply.Header.Get(bus.HeaderJobStatus) == "succeeded" {
						t.Fatalf("the attack succeeded: %s", reply.Data)
					}
					ev := hosttest.Decode[jobs.ErrorEvent](t, reply.Data)
					for _, w := range a.wants {
						if !strings.Contains(ev.Error, w) {
							t.Errorf("error %q lacks %q", ev.Error, w)
						}
					}
					if strings.Contains(ev.Error, "hosts-password") || strings.Contains(ev.StderrTail, "hosts-password") {
						t.Errorf("the host's file reached the caller: %+v", ev)
					}
					if ev.Attempts != 1 {
						t.Errorf("%d attempts: a refused tree is the job's doing and never retried", ev.Attempts)
					}
					after := snapshotTree(t, secret)
					for p, f := range before {
						if after[p] != f {
							t.Errorf("host file %s changed: %+v -> %+v", p, f, after[p])
						}
					}
					for p := range after {
						if _, ok := before[p]; !ok {
							t.Errorf("new host file %s", p)
						}
					}
					// The slot is free and the host unharmed.
					if got := string(h.Call("hello", `{"name":"Ada"}`).Data); got != `{"greeting":"Hello, Ada!"}` {
						t.Fatalf("after the attack, hello returned %s", got)
					}
				})
			}
			t.Run("manifests naming host files are refused at load", func(t *testing.T) {
				var refusal string
				h.Eventually("both manifests are refused", func() bool {
					refusal = ""
					for _, e := range h.Logs.FilterMessage("function refused; fix the file and it is picked up again").All() {
						refusal += fmt.Sprint(e.ContextMap()["error"]) + "\n"
					}
					return strings.Contains(refusal, "package.json:3") && strings.Contains(refusal, "requirements.txt:2") &&
						strings.Contains(refusal, "requirements.txt:3")
				})
				if strings.Contains(refusal, "hosts-password") || strings.Contains(refusal, "root's file") {
					t.Fatalf("a refusal carries a host file's content: %s", refusal)
				}
				for _, fn := range []string{"pkgfile", "pkgreq"} {
					if reply := h.Call(fn, `{}`); reply.Header.Get(bus.HeaderJobStatus) == "succeeded" {
						t.Errorf("%s ran: %s", fn, reply.Data)
					}
				}
				after := snapshotTree(t, secret)
				for p, f := range before {
					if after[p] != f {
						t.Errorf("host file %s changed: %+v -> %+v", p, f, after[p])
					}
				}
			})
			t.Run("nothing of the host's reached a volume", func(t *testing.T) {
				for _, v := range []string{"boundary-commit", "boundary-self"} {
					if ok := volumeHasVersion(t, h, v); ok {
						t.Errorf("volume %s was committed", v)
					}
				}
			})
		})
	}
}

// volumeHasVersion reports whether volume name has a committed version.
func volumeHasVersion(t *testing.T, h *hosttest.H, name string) bool {
	t.Helper()
	for _, n := range h.VolumeNames(nil) {
		if n == name {
			return true
		}
	}
	return false
}
