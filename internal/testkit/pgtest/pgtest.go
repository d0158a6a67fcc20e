// Package pgtest runs a real, throwaway PostgreSQL cluster for tests: initdb into a temporary
// directory with wal_level=logical, a server on a free loopback port and a private socket
// directory, stopped when the test ends. PostgreSQL refuses to run as root, and the tests run as
// root, so the server runs as the postgres user (runuser) with its directories chowned to it.
package pgtest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// InstallCommand installs the server this package runs (scripts/setup runs it).
const InstallCommand = "apt-get install postgresql"

// Cluster is a running throwaway cluster.
type Cluster struct {
	// Port is the TCP port on 127.0.0.1; User the superuser (trust authentication on loopback).
	Port int
	User string
	// Dir is the data directory; SocketDir where its Unix socket is.
	Dir, SocketDir string
	bin            string
	asUser         []string // the command prefix that runs a program as the cluster's owner
}

// DSN is a connection string to database db ("postgres" when empty) as the superuser.
func (c *Cluster) DSN(db string) string {
	if db == "" {
		db = "postgres"
	}
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", c.User, c.Port, db)
}

// BinDir finds the newest /usr/lib/postgresql/<version>/bin holding initdb ($PGTEST_BIN first).
func BinDir() (string, error) {
	if d := os.Getenv("PGTEST_BIN"); d != "" {
		return d, nil
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(found, func(i, j int) bool { return version(found[i]) > version(found[j]) })
	if len(found) == 0 {
		return "", fmt.Errorf("no PostgreSQL server: /usr/lib/postgresql/<version>/bin/initdb not found; install it with `%s` (scripts/setup does)", InstallCommand)
	}
	return filepath.Dir(found[0]), nil
}

func version(initdb string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return v
}

// Start runs a cluster with wal_level=logical until the test ends. Without a server the test
// is skipped, loudly, or fails when PGTEST_REQUIRE is set (CI).
func Start(t testing.TB) *Cluster {
	t.Helper()
	return StartWith(t, "logical")
}

// StartWith is Start with another wal_level ("replica" for the test of a server that cannot
// decode its WAL).
func StartWith(t testing.TB, walLevel string) *Cluster {
	t.Helper()
	bin, err := BinDir()
	if err != nil {
		if os.Getenv("PGTEST_REQUIRE") != "" {
			t.Fatalf("PGTEST_REQUIRE is set but %v", err)
		}
		t.Skipf("\n\n*** SKIPPING POSTGRES TESTS: %v ***\n\n", err)
	}
	c := &Cluster{bin: bin, User: "postgres"}
	if err := c.owner(); err != nil {
		t.Fatal(err)
	}
	root, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	c.Dir, c.SocketDir = filepath.Join(root, "data"), filepath.Join(root, "sock")
	if err := c.initdb(root, walLevel); err != nil {
		t.Fatal(err)
	}
	// A port picked by closing a listener can be taken again before the server binds it.
	for range 3 {
		if c.Port, err = freePort(); err != nil {
			t.Fatal(err)
		}
		if err = c.run("start", "-w", "-t", "60", "-l", filepath.Join(root, "server.log"), "-o", "-p "+strconv.Itoa(c.Port)); err == nil {
			break
		}
	}
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(root, "server.log"))
		t.Fatalf("start PostgreSQL: %v\n%s", err, log)
	}
	t.Cleanup(func() { c.Stop() })
	return c
}

// owner picks who runs the server: the current user unless root, else the postgres user
// through runuser.
func (c *Cluster) owner() error {
	if os.Geteuid() != 0 {
		u, err := user.Current()
		if err != nil {
			return fmt.Errorf("who am I: %w", err)
		}
		c.User = u.Username
		return nil
	}
	if _, err := user.Lookup("postgres"); err != nil {
		return fmt.Errorf("PostgreSQL refuses to run as root and there is no postgres user to run it as (the postgresql package makes one): %w", err)
	}
	c.asUser = []string{"runuser", "-u", "postgres", "--"}
	return nil
}

func (c *Cluster) initdb(root, walLevel string) error {
	if err := os.MkdirAll(c.SocketDir, 0o700); err != nil {
		return err
	}
	if c.asUser != nil {
		if out, err := exec.Command("chown", "-R", "postgres:", root).CombinedOutput(); err != nil {
			return fmt.Errorf("chown %s to postgres: %v: %s", root, err, out)
		}
	}
	if err := c.exec("initdb", "-D", c.Dir, "-U", c.User, "-A", "trust", "-E", "UTF8", "--no-sync"); err != nil {
		return err
	}
	conf := fmt.Sprintf("listen_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\nwal_level = %s\n"+
		"max_wal_senders = 10\nmax_replication_slots = 10\nfsync = off\nshared_buffers = 16MB\n", c.SocketDir, walLevel)
	f, err := os.OpenFile(filepath.Join(c.Dir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(conf)
	return err
}

// run runs pg_ctl with args on the cluster.
func (c *Cluster) run(args ...string) error {
	return c.exec("pg_ctl", append([]string{"-D", c.Dir}, args...)...)
}

func (c *Cluster) exec(prog string, args ...string) error {
	argv := append(append([]string{}, c.asUser...), append([]string{filepath.Join(c.bin, prog)}, args...)...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = "/" // runuser's user may not enter the test's directory
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", prog, strings.Join(args, " "), err, out.String())
	}
	return nil
}

// Stop stops the server (fast: open sessions are ended); calling it again does nothing.
func (c *Cluster) Stop() {
	if _, err := os.Stat(filepath.Join(c.Dir, "postmaster.pid")); err != nil {
		return
	}
	_ = c.run("stop", "-m", "fast", "-w", "-t", "60")
}

// Psql runs sql with psql against db and returns its output (unaligned, tuples only).
func (c *Cluster) Psql(ctx context.Context, db, sql string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "psql", "-X", "-v", "ON_ERROR_STOP=1", "-At", "-d", c.DSN(db), "-c", sql).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("psql %q: %w: %s", sql, err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// MustPsql is Psql failing the test on error.
func (c *Cluster) MustPsql(t testing.TB, db, sql string) string {
	t.Helper()
	out, err := c.Psql(context.Background(), db, sql)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
