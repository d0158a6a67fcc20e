package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// The job's environment reaches the jail through neither bwrap's own
// environment nor its command line: both are readable in /proc/<pid>/environ
// and /proc/<pid>/cmdline by every process of the jail's uid on the host
// (and the command line by everyone), and env: values are secrets. Start
// starts bwrap with an empty environment and hands it "--setenv NAME VALUE"
// for each variable through --args, a pipe bwrap reads NUL-separated
// arguments from and closes; bwrap applies them with setenv(3) on its heap,
// which /proc/<pid>/environ (the initial block) does not show. This also
// keeps loader variables (LD_PRELOAD=<a file in /job>, GCONV_PATH, ...) away
// from bwrap's own dynamic loader and libc, which run on the host.

// envArgs is the --args content that sets env (jail defaults included).
// Spec.validate has refused NUL in env, so no value can smuggle an argument.
func envArgs(env []string) []byte {
	m := jailEnv(env)
	var b []byte
	for _, k := range m.keys {
		b = append(b, "--setenv\x00"...)
		b = append(b, k...)
		b = append(b, 0)
		b = append(b, m.vals[k]...)
		b = append(b, 0)
	}
	return b
}

// argsPipe returns the read end of a pipe that will hold data, for bwrap's
// --args, which reads it to EOF. A goroutine writes it, since an environment
// may exceed a pipe's buffer; it ends at EOF, or with EPIPE once every read
// end is closed (bwrap gone, or never started).
func argsPipe(data []byte) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: args pipe: %w", err)
	}
	go func() {
		_, _ = w.Write(data) // a bwrap that died early is reported by its exit
		w.Close()
	}()
	return r, nil
}

// openEtcFile opens an /etc file for bwrap to copy into the jail. One that
// went away since Args looked is copied as empty: its absence then, like
// its content, is the host's business, and the job must not fail for it.
func openEtcFile(p string) (*os.File, error) {
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		f, err = os.Open(os.DevNull)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox: open %s for the jail's /etc: %w", p, err)
	}
	return f, nil
}

// seccompPipe returns the read end of a pipe holding prog, for bwrap's
// --seccomp, which reads it to EOF. A pipe per run, because the file
// offset of a shared memfd would be shared by concurrent runs too.
func seccompPipe(prog []byte) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: seccomp pipe: %w", err)
	}
	// The filter (a few hundred bytes) fits in the pipe's buffer, so
	// this does not block.
	_, err = w.Write(prog)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("sandbox: seccomp pipe: %w", err)
	}
	return r, nil
}
