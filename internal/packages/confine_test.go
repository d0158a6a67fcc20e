package packages

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/agenthost/host/internal/manifest"
)

// fileState is what an attack must leave as it was: every entry of a host tree, with its
// mode, owner, link count and content.
type fileState struct {
	Mode     fs.FileMode
	UID, GID uint32
	Nlink    uint64
	Content  string
}

func treeState(t *testing.T, root string) map[string]fileState {
	t.Helper()
	m := map[string]fileState{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		s := fileState{Mode: info.Mode(), UID: st.Uid, GID: st.Gid, Nlink: uint64(st.Nlink)}
		if info.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			s.Content = string(b)
		}
		m[p] = s
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// hostProject is a host directory the function's author does not own: a package (so that a
// file: dependency on it resolves) holding a file only its owner, root on a root host, reads.
func hostProject(t *testing.T) (dir, secret string) {
	t.Helper()
	dir = filepath.Join(openDir(t), "host-project")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"package.json": `{"name":"x","version":"1.0.0"}`})
	secret = filepath.Join(dir, "secret")
	// Shaped like a requirement, so that pip reading it would name it in its error.
	if err := os.WriteFile(secret, []byte("host-secret-content-7f3a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, secret
}

// TestInstallCannotReachHostFiles runs the attacks of issue 21 through Ensure, as a run would
// after load (whose check, TestCheckPackageJSON and the functions tests, refuses them first):
// a package.json dependency on a host folder, which Bun used to hard link into the install
// and the host to chmod 0644 there (changing the original), and requirements.txt lines that
// made pip read a host file and quote it in the error every caller sees.
func TestInstallCannotReachHostFiles(t *testing.T) {
	needTool(t, "bun")
	needTool(t, jailPython)
	host, secret := hostProject(t)
	cases := []struct {
		name, entry string
		files       map[string]string
		want        string
	}{
		{"file: a host folder", "main.ts", map[string]string{"main.ts": `import x from "x"; console.log(x);`,
			"package.json": `{"dependencies": {"x": "file:` + host + `"}}`}, "package.json:1: dependencies \"x\""},
		{"a host folder's path", "main.ts", map[string]string{"main.ts": `import x from "x"; console.log(x);`,
			"package.json": "{\n\"dependencies\": {\"is-number\": \"7.0.0\"},\n\"devDependencies\": {\"x\": \"" + host + "\"}}"}, "package.json:3: devDependencies \"x\""},
		{"-r a host file", "main.py", map[string]string{"main.py": "", "requirements.txt": "zzhello\n-r " + secret + "\n"}, "requirements.txt:2:"},
		{"-c a host file", "main.py", map[string]string{"main.py": "", "requirements.txt": "zzhello\n-c " + secret + "\n"}, "requirements.txt:2:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := openDir(t)
			code := filepath.Join(root, "fn")
			writeFiles(t, code, c.files)
			wheels := filepath.Join(root, "wheels")
			os.Mkdir(wheels, 0o755)
			writeWheel(t, wheels, "zzhello", "1.0", "")
			before := treeState(t, host)
			inst := newInstaller(t, Options{CacheDir: filepath.Join(root, "cache"), PipIndexURL: NoIndex, PipFindLinks: []string{wheels}})
			var logs logLines
			got, err := inst.Ensure(ctxT(t), code, c.entry, logs.logf)
			if err == nil {
				t.Errorf("installed %+v; want the manifest refused", got)
			} else if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error lacks %q: %v", c.want, err)
			}
			t.Logf("error: %v", err)
			if n := inst.installs.Load(); n != 0 {
				t.Errorf("a package manager ran %d times on a refused manifest", n)
			}
			for _, text := range []string{errString(err), logs.String()} {
				if strings.Contains(text, "host-secret-content") {
					t.Errorf("the host file's content came back:\n%s", text)
				}
			}
			if after := treeState(t, host); !reflect.DeepEqual(after, before) {
				t.Errorf("the host folder changed:\nbefore %+v\nafter  %+v", before, after)
			}
		})
	}
}

// runOut runs argv as the installer runs a package manager, in its own directory.
func (i *Installer) runOut(argv ...string) (string, error) {
	var logs logLines
	err := i.run(context.Background(), argv[0], argv, i.toolEnv(), i.as.dir, &jobLog{f: logs.logf})
	return logs.String(), err
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestLocalDependencyInstalls: a dependency inside the function folder is still a source. It
// is copied into the install (the folder is not where the installer runs), its content is part
// of the key, and what ends up in the install are copies, owned by the host.
func TestLocalDependencyInstalls(t *testing.T) {
	needTool(t, "bun")
	root := openDir(t)
	code := filepath.Join(root, "fn")
	writeFiles(t, root, map[string]string{
		"fn/main.ts":                 "import v from \"pkg\";\nimport isNumber from \"is-number\";\nconsole.log(JSON.stringify({ v, n: isNumber(v) }));\n",
		"fn/package.json":            `{"dependencies": {"pkg": "file:./vendor/pkg", "is-number": "7.0.0"}}`,
		"fn/vendor/pkg/package.json": `{"name": "pkg", "version": "1.0.0", "main": "index.js"}`,
		"fn/vendor/pkg/index.js":     "module.exports = 42;\n",
	})
	if err := manifest.Check(code, "main.ts"); err != nil {
		t.Fatalf("refused at load: %v", err)
	}
	inst := newInstaller(t, Options{CacheDir: filepath.Join(root, "cache")})
	var logs logLines
	got, err := inst.Ensure(ctxT(t), code, "main.ts", logs.logf)
	if err != nil {
		t.Fatalf("Ensure: %v\n%s", err, logs.String())
	}
	if out := runJailedBun(t, code, "main.ts", got); out != `{"v":42,"n":true}` {
		t.Errorf("jailed run printed %q", out)
	}
	checkCopies(t, filepath.Dir(got.Dir))

	// A new vendored version is a new install.
	writeFiles(t, code, map[string]string{"vendor/pkg/index.js": "module.exports = 43;\n"})
	again, err := inst.Ensure(ctxT(t), code, "main.ts", nil)
	if err != nil || again.Key == got.Key {
		t.Fatalf("after editing the vendored package: %+v %v (first key %s)", again, err, got.Key)
	}
	if out := runJailedBun(t, code, "main.ts", again); out != `{"v":43,"n":true}` {
		t.Errorf("jailed run printed %q", out)
	}
}

// TestLocalWheelInstalls: a wheel inside the function folder, named by a relative path.
func TestLocalWheelInstalls(t *testing.T) {
	needTool(t, jailPython)
	root := openDir(t)
	code := filepath.Join(root, "fn")
	writeFiles(t, code, map[string]string{"main.py": "import zzlocal\nprint(zzlocal.VALUE)\n",
		"requirements.txt": "./wheels/zzlocal-1.0-py3-none-any.whl\n"})
	os.Mkdir(filepath.Join(code, "wheels"), 0o755)
	writeWheel(t, filepath.Join(code, "wheels"), "zzlocal", "1.0", "VALUE = 7\n")
	empty := filepath.Join(root, "no-wheels")
	os.Mkdir(empty, 0o755)
	inst := newInstaller(t, Options{CacheDir: filepath.Join(root, "cache"), PipIndexURL: NoIndex, PipFindLinks: []string{empty}})
	var logs logLines
	got, err := inst.Ensure(ctxT(t), code, "main.py", logs.logf)
	if err != nil {
		t.Fatalf("Ensure: %v\n%s", err, logs.String())
	}
	printed := jailRun(t, []string{"python3", "-s", "-B", "/host/fn/main.py"},
		[][2]string{{code, "/host/fn"}, {got.Dir, got.Target}}, got.Env)
	if printed != "7" {
		t.Errorf("jailed import printed %q", printed)
	}
	checkCopies(t, filepath.Dir(got.Dir))
}

// checkCopies: every file of an install is its own inode, the host's, and not writable by others.
func checkCopies(t *testing.T, dir string) {
	t.Helper()
	n := 0
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Error(err)
			return err
		}
		info, err := os.Lstat(p)
		if err != nil || info.Mode()&fs.ModeSymlink != 0 {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		if info.Mode().IsRegular() {
			n++
			if st.Nlink != 1 {
				t.Errorf("%s has %d links: the install shares it", p, st.Nlink)
			}
		}
		if int(st.Uid) != os.Getuid() || info.Mode().Perm()&0o022 != 0 || info.Mode().Perm()&0o444 != 0o444 {
			t.Errorf("%s is %v uid %d: want the host's (uid %d), readable by all, writable by it alone", p, info.Mode(), st.Uid, os.Getuid())
		}
		return nil
	})
	if n == 0 {
		t.Errorf("no files in %s", dir)
	}
}

// TestPackageManagersRunUnprivileged: on a root host, what the installer runs is the jail's
// user, who cannot read a root-only file nor write beside it; elsewhere it is the host itself.
func TestPackageManagersRunUnprivileged(t *testing.T) {
	host, secret := hostProject(t)
	inst := newInstaller(t, Options{})
	run := inst.runOut
	// A file anyone may read, outside what the installer needs: other functions' snapshots,
	// the host's data. In its own mount namespace, the installer does not see it at all.
	public := filepath.Join(openDir(t), "public")
	if err := os.WriteFile(public, []byte("host-public-content\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("bwrap"); err == nil {
		if inst.as.bwrap == "" {
			t.Fatal("bwrap is installed but the installer does not use it")
		}
		if out, err := run("cat", public); err == nil || strings.Contains(out+errString(err), "host-public-content") {
			t.Errorf("the installer read a host file outside its namespace: %q %v", out, err)
		}
	}
	if out, err := newInstaller(t, Options{Bwrap: "-"}).runOut("cat", public); err != nil || !strings.Contains(out, "host-public-content") {
		t.Errorf("without bwrap: %q %v (want the file read: it is the namespace that hides it)", out, err)
	}

	out, err := run("id", "-u")
	want := strconv.Itoa(os.Getuid())
	if os.Geteuid() == 0 {
		want = strconv.Itoa(DefaultUID)
	}
	if err != nil || strings.TrimSpace(out) != want {
		t.Fatalf("id -u printed %q, %v; want %s", out, err, want)
	}
	if os.Geteuid() != 0 {
		t.Skip("SKIPPING the rest: the host is not root, so the package managers run as it")
	}
	if out, err := run("cat", secret); err == nil || strings.Contains(out+errString(err), "host-secret-content") {
		t.Errorf("the installer read a root-only host file: %q %v", out, err)
	}
	if _, err := run("touch", filepath.Join(host, "planted")); err == nil {
		t.Errorf("the installer wrote into a root directory")
	}
	if _, err := os.Stat(filepath.Join(host, "planted")); err == nil {
		t.Errorf("planted exists")
	}
	// Its own directory it may write: that is where HOME, TMPDIR and the caches are.
	if _, err := run("touch", filepath.Join(inst.as.tmp(), "ok")); err != nil {
		t.Errorf("the installer cannot write its own directory: %v", err)
	}
}

// TestSealRefusesWhatIsNotTheInstalls: what the installer left is taken back through file
// descriptors: a hard link to a host file is refused before anything chmods it, a link is
// never followed, a fifo or socket is refused, and modes become the host's readable ones.
func TestSealRefusesWhatIsNotTheInstalls(t *testing.T) {
	_, secret := hostProject(t)
	cases := []struct {
		name  string
		make  func(t *testing.T, dir string)
		want  string // the error; "" seals
		check func(t *testing.T, dir string)
	}{
		{"hard link to a host file", func(t *testing.T, dir string) {
			if err := os.Link(secret, filepath.Join(dir, "node_modules", "x", "secret")); err != nil {
				t.Fatal(err)
			}
		}, "has 2 hard links", nil},
		{"link to a host file", func(t *testing.T, dir string) {
			if err := os.Symlink(secret, filepath.Join(dir, "node_modules", "x", "secret")); err != nil {
				t.Fatal(err)
			}
		}, "", nil},
		{"link to a host folder", func(t *testing.T, dir string) {
			if err := os.Symlink(filepath.Dir(secret), filepath.Join(dir, "node_modules", "y")); err != nil {
				t.Fatal(err)
			}
		}, "", nil},
		{"fifo", func(t *testing.T, dir string) {
			if err := syscall.Mkfifo(filepath.Join(dir, "node_modules", "x", "fifo"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "is a fifo", nil},
		{"modes", func(t *testing.T, dir string) {
			writeFiles(t, dir, map[string]string{"node_modules/x/private": "p", "node_modules/x/setuid": "s", "node_modules/x/open": "o"})
			os.Chmod(filepath.Join(dir, "node_modules/x/private"), 0o600)
			os.Chmod(filepath.Join(dir, "node_modules/x/setuid"), 0o4775)
			os.Chmod(filepath.Join(dir, "node_modules/x/open"), 0o666)
			os.Chmod(filepath.Join(dir, "node_modules/x"), 0o700)
		}, "", func(t *testing.T, dir string) {
			for name, want := range map[string]fs.FileMode{"node_modules/x/private": 0o644, "node_modules/x/setuid": 0o755,
				"node_modules/x/open": 0o644, "node_modules/x": fs.ModeDir | 0o755, "node_modules/x/index.js": 0o644} {
				if info, err := os.Lstat(filepath.Join(dir, name)); err != nil || info.Mode() != want {
					t.Errorf("%s: %v %v, want %v", name, info.Mode(), err, want)
				}
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(openDir(t), "staging")
			writeFiles(t, dir, map[string]string{"node_modules/x/index.js": "module.exports = 1;\n"})
			as := installer{root: os.Geteuid() == 0, uid: DefaultUID, gid: DefaultGID}
			if as.root {
				// As the installer would have left it: its own. (Before the case adds its
				// entries: chowning a hard link would chown the host's file.)
				filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
					if err == nil {
						os.Lchown(p, DefaultUID, DefaultGID)
					}
					return err
				})
			}
			c.make(t, dir)
			before := treeState(t, filepath.Dir(secret))
			err := as.seal(dir)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("seal: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("seal: %v, want an error with %q", err, c.want)
			}
			t.Logf("seal: %v", err)
			if after := treeState(t, filepath.Dir(secret)); !reflect.DeepEqual(after, before) {
				t.Errorf("the host folder changed:\nbefore %+v\nafter  %+v", before, after)
			}
			if c.want == "" {
				checkSealed(t, dir)
			}
			if c.check != nil {
				c.check(t, dir)
			}
		})
	}
}

// checkSealed: nothing of dir belongs to the installer's user any more.
func checkSealed(t *testing.T, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, _ := os.Lstat(p)
		if st := info.Sys().(*syscall.Stat_t); int(st.Uid) != os.Getuid() || int(st.Gid) != os.Getgid() {
			t.Errorf("%s is still uid %d gid %d", p, st.Uid, st.Gid)
		}
		return nil
	})
}

// TestInstallerDirectory: the installer's own directory is its, and one that is not is refused.
func TestInstallerDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPING: ownership is only handed over by a root host")
	}
	cache := filepath.Join(openDir(t), "packages")
	inst := newInstaller(t, Options{CacheDir: cache})
	for _, p := range []string{inst.as.dir, inst.as.home(), inst.as.tmp(), inst.as.cacheDir("bun"), inst.as.cacheDir("pip")} {
		info, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st := info.Sys().(*syscall.Stat_t); st.Uid != DefaultUID || info.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v uid %d", p, info.Mode(), st.Uid)
		}
	}
	for _, kind := range []Kind{Bun, Pip} {
		if info, err := os.Stat(filepath.Join(cache, string(kind))); err != nil || info.Mode().Perm() != 0o711 {
			t.Errorf("%s: %v %v, want 0711 (staging names not listable)", kind, info.Mode(), err)
		}
	}
	if _, err := New(Options{CacheDir: cache, UID: 0, GID: 5}); err == nil || !strings.Contains(err.Error(), "unprivileged") {
		t.Errorf("New with uid 0: %v", err)
	}
	// Replaced by a link to a root directory: refused, not followed.
	os.RemoveAll(inst.as.dir)
	if err := os.Symlink("/etc", inst.as.dir); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{CacheDir: cache}); err == nil || !strings.Contains(err.Error(), "remove it") {
		t.Errorf("New with the installer's directory a link: %v", err)
	}
}

// TestBwrapView: what a package manager's namespace holds of the host, by its arguments.
func TestBwrapView(t *testing.T) {
	cases := []struct {
		path string
		want []string
	}{
		{"/root/.pyenv/versions/3.11.7/bin/python3.11", []string{"/root/.pyenv/versions/3.11.7"}},
		{"/opt/bun/bin/bun", []string{"/opt/bun"}},
		{"/srv/bin/bun", []string{"/srv/bin/bun"}}, // not all of /srv
		{"/bun", []string{"/bun"}},                 // not all of /
		{"bun", nil},
	}
	for _, c := range cases {
		got := toolRoots(c.path)
		if len(got) > 0 {
			got = got[:1] // the path as given (the test paths do not exist to be resolved)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("toolRoots(%s) = %q, want %q", c.path, got, c.want)
		}
	}
	a := installer{bwrap: "/usr/bin/bwrap", dir: "/data/packages/.installer-65534", readOnly: []string{"/srv/wheels"}}
	args := a.bwrapArgs([]string{"/srv/bin/bun", "install"}, "/data/packages/bun/.tmp-x")
	binds := map[string]string{}
	for k := 0; k+2 < len(args); k++ {
		if strings.HasPrefix(args[k], "--") && strings.Contains(args[k], "bind") {
			binds[args[k+1]] = args[k]
		}
	}
	for src, op := range map[string]string{"/usr": "--ro-bind", "/data/packages/.installer-65534": "--bind", "/data/packages/bun/.tmp-x": "--bind",
		"/srv/wheels": "--ro-bind-try", "/srv/bin/bun": "--ro-bind-try"} {
		if binds[src] != op {
			t.Errorf("%s is bound with %q, want %q (all: %q)", src, binds[src], op, args)
		}
	}
	for _, hidden := range []string{"/", "/srv", "/data", "/data/packages", "/root", "/home", "/tmp"} {
		if _, ok := binds[hidden]; ok {
			t.Errorf("%s is bound into the namespace: %q", hidden, args)
		}
	}
	if tail := args[len(args)-4:]; !reflect.DeepEqual(tail, []string{"/data/packages/bun/.tmp-x", "--", "/srv/bin/bun", "install"}) {
		t.Errorf("args end %q", tail)
	}
}
