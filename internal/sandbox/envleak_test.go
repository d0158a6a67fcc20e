package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/host/internal/testkit/testwait"
)

// Red team row 8: `env: TOKEN=$secret:t` put the value in /proc/<bwrap pid>/environ (and a
// loader variable's value on bwrap's command line), readable on the host by any process of
// the jail's uid. The attack: while a real job sleeps, read the environ and cmdline of every
// bwrap process of that job from the host; the values must be in neither, while the job
// itself sees them.
func TestBwrapEnvNotInHostProc(t *testing.T) {
	for _, hardened := range []bool{true, false} {
		t.Run("hardened="+strconv.FormatBool(hardened), func(t *testing.T) {
			b := newTestBwrap(t)
			if !hardened {
				b = newPlainBwrap(t)
			}
			const token, ldToken = "tok-env-secret-31337", "ld-env-secret-4242"
			dir := testDir(t, b, true)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				var out, errb strings.Builder
				_, err := Run(ctx, b, &Spec{
					Argv:    bash(`printf '%s %s' "$TOKEN" "$LD_TOKEN" > /job/seen.tmp && mv /job/seen.tmp /job/seen && exec sleep 60`),
					WorkDir: dir,
					Env:     []string{"TOKEN=" + token, "LD_TOKEN=" + ldToken},
					Stdout:  &out, Stderr: &errb,
				})
				if err == nil && errb.Len() > 0 {
					t.Logf("job stderr: %s", errb.String())
				}
				done <- err
			}()

			seen := filepath.Join(dir, "seen")
			testwait.For(t, "the job to start", 30*time.Second, func() error {
				_, err := os.Stat(seen)
				return err
			})
			got, _ := os.ReadFile(seen)
			if string(got) != token+" "+ldToken {
				t.Fatalf("the job does not see its environment: %q", got)
			}

			pids := bwrapProcs(t, b.path, dir)
			if len(pids) == 0 {
				t.Fatal("found no bwrap process of the job in /proc")
			}
			for _, pid := range pids {
				for _, f := range []string{"environ", "cmdline"} {
					data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), f))
					if err != nil {
						t.Fatalf("read /proc/%d/%s: %v", pid, f, err)
					}
					for _, v := range []string{token, ldToken} {
						if strings.Contains(string(data), v) {
							t.Errorf("/proc/%d/%s (bwrap) holds %q: %q", pid, f, v, data)
						}
					}
				}
			}
			cancel()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the job did not end after cancel")
			}
		})
	}
}

// bwrapProcs returns the pids of the bwrap processes (the one Run started and the jail's init,
// its fork) whose command line names dir.
func bwrapProcs(t *testing.T, bwrapPath, dir string) []int {
	t.Helper()
	want, err := filepath.EvalSymlinks(bwrapPath)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || exe != want {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), "\x00"+dir+"\x00") {
			pids = append(pids, pid)
		}
	}
	return pids
}
