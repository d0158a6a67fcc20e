package packages

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// These tests run the real tools: Bun against the npm registry (reachable
// here), pip against wheels the tests build, and bubblewrap for the jailed
// view of an install.

func needTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("SKIPPING: %s is not installed", name)
	}
	return p
}

// openDir is a directory the jail's uid can traverse (t.TempDir's parent is 0700).
func openDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "packages-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// logLines collects logf output.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func (l *logLines) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

func newInstaller(t *testing.T, o Options) *Installer {
	t.Helper()
	if o.CacheDir == "" {
		o.CacheDir = filepath.Join(openDir(t), "packages")
	}
	if o.Log == nil {
		o.Log = zaptest.NewLogger(t)
	}
	i, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

const isNumberTS = `import isNumber from "is-number";
import * as fs from "fs";
import * as path from "node:path";
console.log(JSON.stringify({ five: isNumber(5), str: isNumber("x"), sep: path.sep, fs: typeof fs.readFileSync }));
`

const isNumberOut = `{"five":true,"str":false,"sep":"/","fs":"function"}`

// jailRun runs argv in a bubblewrap jail built like the runner's (the
// sandbox package's): no network, read-only system, uid 65534, the given
// read-only mounts. It is spelled out here to keep these tests independent
// of the sandbox package.
func jailRun(t *testing.T, argv []string, mounts [][2]string, env []string) string {
	t.Helper()
	bwrap := needTool(t, "bwrap")
	args := []string{"--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
		"--uid", "65534", "--gid", "65534", "--ro-bind", "/usr", "/usr"}
	for _, p := range []string{"/bin", "/sbin", "/lib", "/lib64"} {
		if target, err := os.Readlink(p); err == nil {
			args = append(args, "--symlink", target, p)
		} else if info, err := os.Stat(p); err == nil && info.IsDir() {
			args = append(args, "--ro-bind", p, p)
		}
	}
	args = append(args, "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache",
		"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/job")
	for _, m := range mounts {
		args = append(args, "--ro-bind", m[0], m[1])
	}
	args = append(args, "--remount-ro", "/", "--chdir", "/job", "--")
	cmd := exec.Command(bwrap, append(args, argv...)...)
	cmd.Dir = "/"
	cmd.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/job", "NO_COLOR=1", "BUN_RUNTIME_TRANSPILER_CACHE_PATH=0"}, env...)
	if os.Geteuid() == 0 {
		// As the runner does: start bwrap as the unprivileged uid, so that the
		// install must really be readable by others.
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("jailed %q: %v: %s%s", argv, err, stdout.String(), stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// runJailedBun runs /host/fn/<entry> with bun in a jail, the function's code
// at /host/fn and the install at its Target, as the runner does.
func runJailedBun(t *testing.T, code, entry string, inst *Installed) string {
	t.Helper()
	return jailRun(t, []string{"bun", "--no-install", "--no-env-file", "/host/fn/" + entry},
		[][2]string{{code, "/host/fn"}, {inst.Dir, inst.Target}}, inst.Env)
}

// runHostBun runs the script unjailed, from its host path, with HostEnv.
func runHostBun(t *testing.T, code, entry string, inst *Installed) string {
	t.Helper()
	cmd := exec.Command("bun", "--no-install", "--no-env-file", filepath.Join(code, entry))
	cmd.Dir = openDir(t)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + cmd.Dir, "NO_COLOR=1"}, inst.HostEnv...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("unjailed bun: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestBunPackageJSON(t *testing.T) {
	needTool(t, "bun")
	root := openDir(t)
	code := filepath.Join(root, "fn")
	writeFiles(t, root, map[string]string{
		"fn/main.ts":      isNumberTS,
		"fn/package.json": `{"name":"fn","dependencies":{"is-number":"7.0.0"},"devDependencies":{"this-package-does-not-exist-zz9":"1.0.0"}}`,
	})
	inst := newInstaller(t, Options{CacheDir: filepath.Join(root, "cache")})

	var logs logLines
	t0 := time.Now()
	got, err := inst.Ensure(ctxT(t), code, "main.ts", logs.logf)
	first := time.Since(t0)
	if err != nil {
		t.Fatalf("Ensure: %v\nlog:\n%s", err, logs.String())
	}
	t.Logf("first Ensure (install) took %v; log:\n%s", first, logs.String())
	if got.Kind != Bun || got.Target != BunTarget || len(got.Env) != 0 ||
		len(got.HostEnv) != 1 || got.HostEnv[0] != "NODE_PATH="+got.Dir {
		t.Errorf("Installed = %+v", got)
	}
	if b, err := os.ReadFile(filepath.Join(got.Dir, "is-number", "package.json")); err != nil || !strings.Contains(string(b), `"version": "7.0.0"`) {
		t.Errorf("is-number 7.0.0 not installed: %v %s", err, b)
	}
	log := logs.String()
	for _, want := range []string{"installing npm packages is-number (first run; cached afterwards)…", "is-number@7.0.0", "packages ready in"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	// World-readable for the jail's uid.
	info, err := os.Stat(filepath.Join(got.Dir, "is-number", "index.js"))
	if err != nil || info.Mode().Perm()&0o004 == 0 {
		t.Errorf("index.js not world-readable: %v %v", info.Mode(), err)
	}

	// Cache hit: no install, no log line.
	var logs2 logLines
	t0 = time.Now()
	again, err := inst.Ensure(ctxT(t), code, "main.ts", logs2.logf)
	t.Logf("second Ensure (cached) took %v", time.Since(t0))
	if err != nil || again.Dir != got.Dir || again.Key != got.Key {
		t.Fatalf("second Ensure = %+v, %v", again, err)
	}
	if n := inst.installs.Load(); n != 1 {
		t.Errorf("installs = %d, want 1", n)
	}
	if logs2.len() != 0 {
		t.Errorf("cache hit logged: %s", logs2.String())
	}
	// A fresh Installer (another host process) finds the cache too.
	other := newInstaller(t, Options{CacheDir: filepath.Join(root, "cache")})
	if o, err := other.Ensure(ctxT(t), code, "main.ts", nil); err != nil || o.Dir != got.Dir || other.installs.Load() != 0 {
		t.Errorf("other process: %+v %v installs=%d", o, err, other.installs.Load())
	}

	if out := runJailedBun(t, code, "main.ts", got); out != isNumberOut {
		t.Errorf("jailed run printed %q, want %q", out, isNumberOut)
	}
	if out := runHostBun(t, code, "main.ts", got); out != isNumberOut {
		t.Errorf("unjailed run printed %q, want %q", out, isNumberOut)
	}

	// Changing package.json changes the key.
	writeFiles(t, root, map[string]string{"fn/package.json": `{"dependencies":{"is-number":"6.0.0"}}`})
	v6, err := inst.Ensure(ctxT(t), code, "main.ts", nil)
	if err != nil || v6.Key == got.Key {
		t.Fatalf("after package.json change: %+v %v", v6, err)
	}
	if b, _ := os.ReadFile(filepath.Join(v6.Dir, "is-number", "package.json")); !strings.Contains(string(b), `"version": "6.0.0"`) {
		t.Errorf("is-number 6.0.0 not installed: %s", b)
	}
}

func TestBunBareImports(t *testing.T) {
	needTool(t, "bun")
	root := openDir(t)
	code := filepath.Join(root, "fn")
	writeFiles(t, root, map[string]string{
		"fn/main.ts": `import { helper } from "./helper";
console.log(helper());
`,
		"fn/helper.ts": isNumberTS + `export const helper = () => "";` + "\n",
	})
	inst := newInstaller(t, Options{CacheDir: filepath.Join(root, "cache")})
	var logs logLines
	got, err := inst.Ensure(ctxT(t), code, "main.ts", logs.logf)
	if err != nil {
		t.Fatalf("Ensure: %v\n%s", err, logs.String())
	}
	pj, err := os.ReadFile(filepath.Join(filepath.Dir(got.Dir), "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(pj), `"is-number": "latest"`) || strings.Contains(string(pj), `"fs"`) || strings.Contains(string(pj), "path") {
		t.Errorf("generated package.json:\n%s", pj)
	}
	if out := runJailedBun(t, code, "main.ts", got); !strings.HasPrefix(out, isNumberOut) {
		t.Errorf("jailed run printed %q", out)
	}
}

// pinnedBunLock pins is-odd to 3.0.0 although ^3.0.0 would resolve to 3.0.1,
// and lists a devDependency.
const pinnedBunLock = `{
  "lockfileVersion": 2,
  "configVersion": 1,
  "workspaces": {
    "": {
      "dependencies": {
        "is-odd": "^3.0.0",
      },
      "devDependencies": {
        "is-number": "7.0.0",
      },
    },
  },
  "packages": {
    "is-number": ["is-number@7.0.0", "", {}, "sha512-41Cifkg6e8TylSpdtTpeLVMqvSBEVzTttHvERD741+pnZ8ANv0004MRL43QKPDlK9cGvNp6NZWZUBlbGXYxxng=="],

    "is-odd": ["is-odd@3.0.0", "", { "dependencies": { "is-number": "^6.0.0" } }, "sha512-204vE5IJ0Cd6pA6x1dMyLooGk6/xeKuq90imFuJN/ndMDBP4Sk9tJpBlTedHPvt6KDbtTDTsjVzzgctFqNV7FQ=="],

    "is-odd/is-number": ["is-number@6.0.0", "", {}, "sha512-Wu1VHeILBK8KAWJUAiSZQX94GmOE45Rg6/538fKwiloUu21KncEkYGPqob2oSZ5mUT73vLGrHQjKw3KMPwfDzg=="],
  }
}
`

func TestBunLockfile(t *testing.T) {
	needTool(t, "bun")
	root := openDir(t)
	code := filepath.Join(root, "fn")
	writeFiles(t, root, map[string]string{
		"fn/main.ts":      `import isOdd from "is-odd"; console.log(isOdd(3));`,
		"fn/package.json": `{"dependencies":{"is-odd":"^3.0.0"},"devDependencies":{"is-number":"7.0.0"}}`,
		"fn/bun.lock":     pinnedBunLock,
	})
	inst := newInstaller(t, Options{CacheDir: filepath.Join(root, "cache")})
	var logs logLines
	got, err := inst.Ensure(ctxT(t), code, "main.ts", logs.logf)
	if err != nil {
		t.Fatalf("Ensure: %v\n%s", err, logs.String())
	}
	if b, _ := os.ReadFile(filepath.Join(got.Dir, "is-odd", "package.json")); !strings.Contains(string(b), `"version": "3.0.0"`) {
		t.Errorf("the lockfile's is-odd 3.0.0 was not installed: %s", b)
	}
	if b, err := os.ReadFile(filepath.Join(got.Dir, "is-number", "package.json")); err == nil && strings.Contains(string(b), `"version": "7.0.0"`) {
		t.Error("the devDependency is-number 7.0.0 was installed")
	}
	if out := runJailedBun(t, code, "main.ts", got); out != "true" {
		t.Errorf("jailed run printed %q", out)
	}

	// A lockfile that does not match package.json fails, saying so.
	writeFiles(t, root, map[string]string{"fn/package.json": `{"dependencies":{"is-odd":"^3.0.0","is-even":"1.0.0"}}`})
	_, err = inst.Ensure(ctxT(t), code, "main.ts", nil)
	if err == nil || !strings.Contains(err.Error(), "lockfile") {
		t.Errorf("stale lockfile: %v", err)
	}
	t.Logf("stale lockfile error: %v", err)
}

func TestBunConcurrentInstallsOnce(t *testing.T) {
	needTool(t, "bun")
	root := openDir(t)
	code := filepath.Join(root, "fn")
	writeFiles(t, root, map[string]string{"fn/main.js": `const n = require("is-number"); console.log(n(1));`})
	cache := filepath.Join(root, "cache")
	// Two Installers on one cache stand for two host processes: the lock
	// file serialises them; inside each, singleflight joins the callers.
	a := newInstaller(t, Options{CacheDir: cache})
	b := newInstaller(t, Options{CacheDir: cache})
	var wg sync.WaitGroup
	results := make([]*Installed, 8)
	errs := make([]error, 8)
	logs := make([]logLines, 8)
	for k := range 8 {
		inst := a
		if k%2 == 1 {
			inst = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[k], errs[k] = inst.Ensure(ctxT(t), code, "main.js", logs[k].logf)
		}()
	}
	wg.Wait()
	for k := range 8 {
		if errs[k] != nil {
			t.Fatalf("caller %d: %v", k, errs[k])
		}
		if results[k].Dir != results[0].Dir {
			t.Errorf("caller %d got %s, caller 0 %s", k, results[k].Dir, results[0].Dir)
		}
	}
	if n := a.installs.Load() + b.installs.Load(); n != 1 {
		t.Errorf("installs = %d, want 1", n)
	}
	waiting := 0
	for k := range 8 {
		if strings.Contains(logs[k].String(), "waiting") {
			waiting++
		}
	}
	if waiting == 0 {
		t.Errorf("no caller said it was waiting")
	}
	leftovers, _ := filepath.Glob(filepath.Join(cache, "bun", tmpPrefix+"*"))
	if len(leftovers) != 0 {
		t.Errorf("temporary directories left: %v", leftovers)
	}
}

func TestBunMissingPackage(t *testing.T) {
	needTool(t, "bun")
	root := openDir(t)
	code := filepath.Join(root, "fn")
	writeFiles(t, root, map[string]string{"fn/main.ts": `import x from "this-package-does-not-exist-zz9"; import y from "is-number";`})
	inst := newInstaller(t, Options{CacheDir: filepath.Join(root, "cache")})
	var logs logLines
	_, err := inst.Ensure(ctxT(t), code, "main.ts", logs.logf)
	if err == nil {
		t.Fatal("Ensure succeeded")
	}
	t.Logf("error: %v", err)
	for _, want := range []string{"install npm packages is-number, this-package-does-not-exist-zz9", "bun install failed",
		"this-package-does-not-exist-zz9", "404", "the next run will try again"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q", want)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(root, "cache", "bun"))
	for _, e := range entries {
		if e.IsDir() {
			t.Errorf("failed install left %s in the cache", e.Name())
		}
	}
	// Not cached: a second run tries again.
	if _, err := inst.Ensure(ctxT(t), code, "main.ts", nil); err == nil {
		t.Fatal("second Ensure succeeded")
	}
	if n := inst.installs.Load(); n != 2 {
		t.Errorf("installs = %d, want 2 (a failure must not be cached)", n)
	}
}

func TestBunTimeout(t *testing.T) {
	needTool(t, "bun")
	// A registry that accepts connections and never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	root := openDir(t)
	code := filepath.Join(root, "fn")
	writeFiles(t, root, map[string]string{"fn/main.ts": `import x from "is-number";`})
	inst := newInstaller(t, Options{
		CacheDir:    filepath.Join(root, "cache"),
		NpmRegistry: "http://user:hunter2@" + ln.Addr().String() + "/",
		Timeout:     2 * time.Second,
	})
	t0 := time.Now()
	_, err = inst.Ensure(ctxT(t), code, "main.ts", nil)
	if err == nil {
		t.Fatal("Ensure succeeded")
	}
	t.Logf("error after %v: %v", time.Since(t0), err)
	if !strings.Contains(err.Error(), "timed out after 2s") || !strings.Contains(err.Error(), "the next run will try again") {
		t.Errorf("error: %v", err)
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error shows the registry password: %v", err)
	}
	if d := time.Since(t0); d > 20*time.Second {
		t.Errorf("timeout took %v", d)
	}
}

func TestEnsureCallerGivesUp(t *testing.T) {
	needTool(t, "bun")
	root := openDir(t)
	code := filepath.Join(root, "fn")
	writeFiles(t, root, map[string]string{"fn/main.ts": `import x from "is-number";`})
	inst := newInstaller(t, Options{CacheDir: filepath.Join(root, "cache")})
	if _, err := inst.bunTool(ctxT(t)); err != nil { // the probe is not what this test is about
		t.Fatal(err)
	}
	// The caller gives up once the install has started (the import scan
	// before it honours the caller's context like any other step).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	giveUp := func(format string, args ...any) {
		if strings.HasPrefix(format, "installing") {
			cancel()
		}
	}
	if _, err := inst.Ensure(ctx, code, "main.ts", giveUp); err == nil || !strings.Contains(err.Error(), "the install goes on") {
		t.Fatalf("canceled Ensure: %v", err)
	}
	// The install went on; the next caller gets it.
	got, err := inst.Ensure(ctxT(t), code, "main.ts", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(got.Dir, "is-number")); err != nil {
		t.Error(err)
	}
	if n := inst.installs.Load(); n != 1 {
		t.Errorf("installs = %d, want 1", n)
	}
}

func TestNothingToInstall(t *testing.T) {
	root := openDir(t)
	writeFiles(t, root, map[string]string{"main.ts": `import fs from "node:fs"; import path from "path";`, "main.py": "import json\n"})
	inst := newInstaller(t, Options{CacheDir: filepath.Join(root, "cache")})
	for _, entry := range []string{"main.ts", "main.py"} {
		var logs logLines
		got, err := inst.Ensure(ctxT(t), root, entry, logs.logf)
		if err != nil || got != nil || logs.len() != 0 {
			t.Errorf("%s: %+v %v %q", entry, got, err, logs.String())
		}
	}
	if _, err := inst.Ensure(ctxT(t), root, "missing.ts", nil); err == nil {
		t.Error("missing entry: no error")
	}
}

// writeWheel builds a pure-Python wheel by hand (a zip with the module,
// METADATA, WHEEL and RECORD), so that no build backend is needed.
func writeWheel(t *testing.T, dir, name, version, module string) {
	t.Helper()
	distInfo := fmt.Sprintf("%s-%s.dist-info", name, version)
	files := []struct{ path, content string }{
		{name + "/__init__.py", module},
		{distInfo + "/METADATA", fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\n", name, version)},
		{distInfo + "/WHEEL", "Wheel-Version: 1.0\nGenerator: packages-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		w, err := zw.Create(f.path)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(f.content))
		sum := sha256.Sum256([]byte(f.content))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.path, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.content))
	}
	fmt.Fprintf(&record, "%s/RECORD,,\n", distInfo)
	w, err := zw.Create(distInfo + "/RECORD")
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte(record.String()))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, fmt.Sprintf("%s-%s-py3-none-any.whl", name, version))
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

const jailPython = "/usr/bin/python3"

func TestPipWheel(t *testing.T) {
	needTool(t, jailPython)
	root := openDir(t)
	wheels := filepath.Join(root, "wheels")
	if err := os.Mkdir(wheels, 0o755); err != nil {
		t.Fatal(err)
	}
	writeWheel(t, wheels, "zzhello", "1.0", "def hello(name):\n    return 'hello ' + name\n")
	code := filepath.Join(root, "fn")
	writeFiles(t, root, map[string]string{
		"fn/main.py":          "import zzhello\nprint(zzhello.hello('jail'), zzhello.__file__)\n",
		"fn/requirements.txt": "# the test's wheel\nzzhello==1.0\n",
	})
	inst := newInstaller(t, Options{
		CacheDir:     filepath.Join(root, "cache"),
		PipIndexURL:  NoIndex,
		PipFindLinks: []string{wheels},
	})
	var logs logLines
	t0 := time.Now()
	got, err := inst.Ensure(ctxT(t), code, "main.py", logs.logf)
	if err != nil {
		t.Fatalf("Ensure: %v\n%s", err, logs.String())
	}
	t.Logf("first Ensure (install) took %v; log:\n%s", time.Since(t0), logs.String())
	if got.Kind != Pip || got.Target != PipTarget || strings.Join(got.Env, " ") != "PYTHONPATH=/host/python" ||
		strings.Join(got.HostEnv, " ") != "PYTHONPATH="+got.Dir {
		t.Errorf("Installed = %+v", got)
	}
	for _, want := range []string{"installing Python packages zzhello (first run; cached afterwards)…", "Successfully installed zzhello-1.0", "packages ready in"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q", want)
		}
	}

	t0 = time.Now()
	if again, err := inst.Ensure(ctxT(t), code, "main.py", nil); err != nil || again.Dir != got.Dir {
		t.Fatalf("second Ensure: %+v %v", again, err)
	}
	t.Logf("second Ensure (cached) took %v", time.Since(t0))
	if n := inst.installs.Load(); n != 1 {
		t.Errorf("installs = %d, want 1", n)
	}

	// Unjailed, with the host path.
	cmd := exec.Command(jailPython, "-s", "-B", filepath.Join(code, "main.py"))
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, got.HostEnv...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "hello jail "+got.Dir) {
		t.Errorf("unjailed import: %v: %s", err, out)
	}

	// Jailed, as the runner will mount it.
	printed := jailRun(t, []string{"python3", "-s", "-B", "/host/fn/main.py"},
		[][2]string{{code, "/host/fn"}, {got.Dir, got.Target}}, got.Env)
	if printed != "hello jail /host/python/zzhello/__init__.py" {
		t.Errorf("jailed import printed %q", printed)
	}
}

func TestPipMissingRequirement(t *testing.T) {
	needTool(t, jailPython)
	root := openDir(t)
	wheels := filepath.Join(root, "wheels")
	os.Mkdir(wheels, 0o755)
	code := filepath.Join(root, "fn")
	writeFiles(t, root, map[string]string{"fn/main.py": "", "fn/requirements.txt": "this-package-does-not-exist-zz9==1.0\n"})
	inst := newInstaller(t, Options{CacheDir: filepath.Join(root, "cache"), PipIndexURL: NoIndex, PipFindLinks: []string{wheels}})
	_, err := inst.Ensure(ctxT(t), code, "main.py", nil)
	if err == nil {
		t.Fatal("Ensure succeeded")
	}
	t.Logf("error: %v", err)
	for _, want := range []string{"install Python packages this-package-does-not-exist-zz9", "pip install failed",
		"No matching distribution found for this-package-does-not-exist-zz9", "the next run will try again"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q", want)
		}
	}
}

// TestPipForAPythonWithoutPip installs for an interpreter that has no pip (a
// venv made --without-pip from the jail's python stands for Debian's python3
// without python3-pip), through another python3's pip --python.
func TestPipForAPythonWithoutPip(t *testing.T) {
	needTool(t, jailPython)
	root := openDir(t)
	venv := filepath.Join(root, "venv")
	if out, err := exec.Command(jailPython, "-m", "venv", "--without-pip", venv).CombinedOutput(); err != nil {
		t.Skipf("SKIPPING: cannot make a venv without pip: %v: %s", err, out)
	}
	py := filepath.Join(venv, "bin", "python")
	if err := exec.Command(py, "-m", "pip", "--version").Run(); err == nil {
		t.Skip("SKIPPING: the venv has pip after all")
	}
	wheels := filepath.Join(root, "wheels")
	os.Mkdir(wheels, 0o755)
	writeWheel(t, wheels, "zzfallback", "2.0", "VALUE = 42\n")
	code := filepath.Join(root, "fn")
	writeFiles(t, root, map[string]string{"fn/main.py": "", "fn/requirements.txt": "zzfallback\n"})
	inst := newInstaller(t, Options{CacheDir: filepath.Join(root, "cache"), Python: py, PipIndexURL: NoIndex, PipFindLinks: []string{wheels}})
	got, err := inst.Ensure(ctxT(t), code, "main.py", nil)
	if err != nil {
		if strings.Contains(err.Error(), "no other python") {
			t.Skipf("SKIPPING: %v", err)
		}
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(inst.pip.argv, " "), "--python "+py) {
		t.Errorf("pip argv %q does not use --python", inst.pip.argv)
	}
	cmd := exec.Command(jailPython, "-s", "-c", "import zzfallback; print(zzfallback.VALUE)")
	cmd.Env = got.HostEnv
	if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "42" {
		t.Errorf("import under %s: %v: %s", jailPython, err, out)
	}
}

// TestClaudeTemplate installs the Claude Code template's imports, as the host
// will for functions/claude.ts. It downloads a large package, so it runs only
// with PACKAGES_TEST_CLAUDE=1.
func TestClaudeTemplate(t *testing.T) {
	if os.Getenv("PACKAGES_TEST_CLAUDE") == "" {
		t.Skip("set PACKAGES_TEST_CLAUDE=1 to install @anthropic-ai/claude-agent-sdk from npm")
	}
	needTool(t, "bun")
	root := openDir(t)
	code := filepath.Join(root, "functions")
	writeFiles(t, root, map[string]string{"functions/claude.ts": `import { query } from "@anthropic-ai/claude-agent-sdk";
import * as fs from "fs";
import * as path from "path";
console.log(typeof query, typeof fs.existsSync, typeof path.join);
`})
	inst := newInstaller(t, Options{CacheDir: filepath.Join(root, "cache")})
	var logs logLines
	t0 := time.Now()
	got, err := inst.Ensure(ctxT(t), code, "claude.ts", logs.logf)
	if err != nil {
		t.Fatalf("Ensure: %v\n%s", err, logs.String())
	}
	t.Logf("install took %v; log:\n%s", time.Since(t0), logs.String())
	t0 = time.Now()
	if _, err := inst.Ensure(ctxT(t), code, "claude.ts", nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("cached Ensure took %v", time.Since(t0))
	if out := runJailedBun(t, code, "claude.ts", got); out != "function function function" {
		t.Errorf("jailed run printed %q", out)
	}
}
