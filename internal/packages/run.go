package packages

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// run starts a package manager with env in dir, sends its output lines to
// out (the first maxForward) and the zap log, and on failure returns an
// error quoting its last stderr lines.
func (i *Installer) run(ctx context.Context, name string, argv, env []string, dir string, out *jobLog) error {
	wrapped := i.as.wrap(argv, dir)
	cmd := exec.CommandContext(ctx, wrapped[0], wrapped[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	// Its own process group, so that a timeout kills the children too, and
	// SIGKILL if the host dies, so that no orphan writes into the cache.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: i.as.cred}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	i.log.Debug("running package manager", zap.Strings("argv", i.scrubAll(argv)), zap.String("dir", dir))
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s as %s: %w%s", name, i.as, err, i.as.hint())
	}
	// Whatever the tool left behind in its group goes before the host takes the tree back
	// (seal): nothing of the installer's user may still be writing into it.
	defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	tail := &lineTail{max: 12}
	var forwarded atomic.Int32
	var wg sync.WaitGroup
	pump := func(r io.Reader, keep bool) {
		defer wg.Done()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := i.scrub(strings.TrimRight(sc.Text(), "\r"))
			if strings.TrimSpace(line) == "" {
				continue
			}
			if keep {
				tail.add(line)
			}
			i.log.Debug(name, zap.String("line", line))
			switch n := forwarded.Add(1); {
			case n <= maxForward:
				out.printf("  %s", line)
			case n == maxForward+1:
				out.printf("  … (more %s output in the host log at debug level)", name)
			}
		}
		io.Copy(io.Discard, r) // a line over the scanner's limit: drain, do not block the tool
	}
	wg.Add(2)
	go pump(stdout, false)
	go pump(stderr, true)
	wg.Wait()
	err = cmd.Wait()
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s was killed: %w", name, ctx.Err())
	}
	msg := tail.String()
	if msg == "" {
		msg = "(no error output)"
	}
	return fmt.Errorf("%s failed (%v): %s%s", name, err, msg, i.as.deniedHint(msg))
}

// maxForward bounds the package manager lines copied into a job's log.
const maxForward = 60

type lineTail struct {
	mu    sync.Mutex
	max   int
	lines []string
}

func (t *lineTail) add(l string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == t.max {
		t.lines = t.lines[1:]
	}
	t.lines = append(t.lines, l)
}

// String joins the error lines (and notes) of the tail, or all of it when
// none says "error": progress lines ("Resolving dependencies") only hide the
// cause.
func (t *lineTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var errs []string
	for _, l := range t.lines {
		if ll := strings.ToLower(l); strings.Contains(ll, "error") || strings.HasPrefix(ll, "note:") || strings.HasPrefix(ll, "hint:") {
			errs = append(errs, l)
		}
	}
	if len(errs) == 0 {
		errs = t.lines
	}
	return strings.Join(errs, " | ")
}

// scrub hides the password of a configured registry or index URL in text
// meant for logs and errors.
func (i *Installer) scrub(s string) string {
	for _, raw := range append([]string{i.o.NpmRegistry, i.o.PipIndexURL}, i.o.PipFindLinks...) {
		u, err := url.Parse(raw)
		if err != nil || u.User == nil {
			continue
		}
		if p, ok := u.User.Password(); ok && p != "" {
			s = strings.ReplaceAll(s, p, "xxxxx")
		} else if n := u.User.Username(); n != "" {
			s = strings.ReplaceAll(s, n+"@", "xxxxx@") // a token as user name
		}
	}
	return s
}

func (i *Installer) scrubAll(argv []string) []string {
	out := make([]string, len(argv))
	for k, a := range argv {
		out[k] = i.scrub(a)
	}
	return out
}

// toolEnv is the environment of a package manager: no variable of the host
// (a PIP_* or npm_config_* there would change an install without changing
// its key), except what reaching the network needs.
func (i *Installer) toolEnv(extra ...string) []string {
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + i.as.home(),
		// Temporary files in the installer's own directory, not in a /tmp shared with others.
		"TMPDIR=" + i.as.tmp(),
		"LANG=C.UTF-8",
		"NO_COLOR=1",
		"DO_NOT_TRACK=1",
	}
	for _, k := range []string{
		"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy", "all_proxy",
		"SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT",
	} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return append(env, extra...)
}
