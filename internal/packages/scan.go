package packages

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/agenthost/host/internal/runtimes"
)

// scanJS is the scanner Bun runs: see scan.mjs for its protocol.
//
// Bun's transpiler rather than esbuild's Go API: Bun is what runs the
// functions and is already required, so its parser accepts exactly what will
// run (the same TypeScript and JSX dialect, the same erasure of type-only
// imports), and it answers which modules are built in; esbuild would be a
// second parser with its own idea of both, and a new dependency.
//
//go:embed scan.mjs
var scanJS string

// scanTimeout bounds the scan of one function's files, Bun's start included.
const scanTimeout = 30 * time.Second

// scanArgs run scan.mjs. Its comments stay in the file: they would only
// fill the process list.
var scanArgs = []string{"-e", stripComments(scanJS)}

func stripComments(js string) string {
	var b strings.Builder
	for _, line := range strings.Split(js, "\n") {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "//") {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// loaderFor is the Bun loader that the runtime uses for a file: Bun parses
// .js and .jsx with JSX, .mjs and .cjs without.
func loaderFor(path string) string {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".ts", ".mts", ".cts":
		return "ts"
	case ".tsx":
		return "tsx"
	case ".js", ".jsx":
		return "jsx"
	}
	return "js"
}

// scanner is one running scan.mjs: started once per function load, it
// answers one request per file.
type scanner struct {
	ctx      context.Context
	cmd      *exec.Cmd
	cancel   context.CancelFunc
	in       io.WriteCloser
	out      *bufio.Reader
	stderr   *bytes.Buffer
	builtins map[string]bool
	dead     error // once bun stopped answering, why
}

// startScanner starts scan.mjs; it runs until close or until ctx ends.
func startScanner(ctx context.Context, bun string) (*scanner, error) {
	ctx, cancel := context.WithCancel(ctx)
	cmd := exec.CommandContext(ctx, bun, scanArgs...)
	// At the root, where no one else can put a bunfig.toml whose preload
	// would run on the host.
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 2 * time.Second
	s := &scanner{ctx: ctx, cmd: cmd, cancel: cancel, stderr: &bytes.Buffer{}}
	cmd.Stderr = &limitedBuffer{buf: s.stderr, max: 4 << 10}
	var err error
	if s.in, err = cmd.StdinPipe(); err != nil {
		cancel()
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		return nil, err
	}
	s.out = bufio.NewReader(stdout)
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("scan imports: start %s: %w (install Bun or configure its path)", bun, err)
	}
	var hello struct {
		Builtins []string `json:"builtins"`
	}
	if err := s.read(&hello); err != nil {
		s.close()
		return nil, err
	}
	if len(hello.Builtins) == 0 {
		s.close()
		return nil, fmt.Errorf("scan imports: %s listed no built-in modules; is it Bun?", bun)
	}
	s.builtins = make(map[string]bool, len(hello.Builtins))
	for _, m := range hello.Builtins {
		s.builtins[m] = true
	}
	return s, nil
}

// read decodes the scanner's next line into v.
func (s *scanner) read(v any) error {
	if s.dead != nil {
		return s.dead
	}
	line, err := s.out.ReadBytes('\n')
	if err != nil {
		// The process died or was killed: its stderr says why.
		werr := s.cmd.Wait()
		msg := strings.TrimSpace(s.stderr.String())
		if msg == "" && werr != nil {
			msg = werr.Error()
		}
		s.dead = fmt.Errorf("scan imports: bun stopped answering: %s", msg)
		if cerr := s.ctx.Err(); cerr != nil {
			s.dead = fmt.Errorf("scan imports: %w", cerr)
		}
		return s.dead
	}
	if err := json.Unmarshal(line, v); err != nil {
		return fmt.Errorf("scan imports: bad answer from bun %q: %w", truncate(string(line), 200), err)
	}
	return nil
}

// scanAnswer is scan.mjs's reply to one file.
type scanAnswer struct {
	Imports []struct {
		Path string `json:"path"`
		Kind string `json:"kind"`
	} `json:"imports"`
	Exports []string `json:"exports"`
	Error   *struct {
		Message string `json:"message"`
		Line    int    `json:"line"`
		Column  int    `json:"column"`
		More    int    `json:"more"`
	} `json:"error"`
}

// scan returns the module specifiers that src imports (import statements
// and re-exports, require calls, dynamic imports with a literal), in source
// order. name is the file as errors show it. A file that does not parse is a
// *runtimes.DefinitionError: the function cannot run until it is fixed, so no
// retry will help.
func (s *scanner) scan(name, loader string, src []byte) ([]string, error) {
	a, err := s.ask(name, loader, src, false)
	if err != nil {
		return nil, fmt.Errorf("%s does not parse, so its imports cannot be installed; fix it and deploy again: %w", name, err)
	}
	specs := make([]string, len(a.Imports))
	for k, imp := range a.Imports {
		specs[k] = imp.Path
	}
	return specs, nil
}

// ask sends one file to the scanner. A file that does not parse is a bare
// *runtimes.DefinitionError naming name:line:col, for the caller to say what
// it was doing.
func (s *scanner) ask(name, loader string, src []byte, exports bool) (*scanAnswer, error) {
	req, err := json.Marshal(map[string]any{"loader": loader, "code": string(src), "exports": exports})
	if err != nil {
		return nil, err
	}
	if _, err := s.in.Write(append(req, '\n')); err != nil {
		return nil, s.read(new(scanAnswer)) // the write failed because bun died: say why
	}
	var a scanAnswer
	if err := s.read(&a); err != nil {
		return nil, err
	}
	if e := a.Error; e != nil {
		where := name
		if e.Line > 0 {
			where = fmt.Sprintf("%s:%d:%d", name, e.Line, e.Column)
		}
		msg := fmt.Sprintf("SyntaxError: %s (%s)", e.Message, where)
		if e.More > 0 {
			msg += fmt.Sprintf(" and %d more", e.More)
		}
		return nil, &runtimes.DefinitionError{Message: msg}
	}
	return &a, nil
}

// Exports parses a TS/JS file with Bun's transpiler, as the runtime will, and
// returns the names it exports ("default" for a default export). A file that
// does not parse is a *runtimes.DefinitionError naming file:line:col. bun is
// the binary to use; "" finds it on the PATH.
func Exports(ctx context.Context, bun, path string) ([]string, error) {
	if bun == "" {
		var err error
		if bun, err = bunOnPath(ctx); err != nil {
			return nil, err
		}
	}
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, scanTimeout)
	defer cancel()
	sc, err := startScanner(ctx, bun)
	if err != nil {
		return nil, err
	}
	defer sc.close()
	a, err := sc.ask(path, loaderFor(path), src, true)
	if err != nil {
		return nil, err
	}
	return a.Exports, nil
}

// close ends the scanner: closing stdin lets it exit; the context kills it
// if it does not.
func (s *scanner) close() {
	s.in.Close()
	if s.dead == nil {
		done := make(chan struct{})
		go func() {
			s.cmd.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			s.cancel()
			<-done
		}
	}
	s.cancel()
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	buf *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.buf.Len(); room > 0 {
		l.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
