package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// testServe is the real serve command under a root with two of main's persistent flags (enough
// to show that persistent flags take keys too), its RunE replaced so that Execute goes through
// flag parsing and the real PreRunE and stops there.
func testServe(t *testing.T) (root, serve *cobra.Command, g *globals) {
	t.Helper()
	g = &globals{}
	root = &cobra.Command{Use: "host", SilenceUsage: true, SilenceErrors: true}
	root.PersistentFlags().StringVar(&g.natsURL, "nats", "", "NATS server URL")
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level")
	serve = serveCmd(g)
	serve.RunE = func(*cobra.Command, []string) error { return nil }
	root.AddCommand(serve)
	return root, serve, g
}

func TestConfigFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		file string // written to host.toml unless "-" (no file at that path)
		args []string
		// check the flags after loading; wantErr: substrings of the error
		check   func(t *testing.T, fs *pflag.FlagSet, g *globals)
		wantErr []string
	}{
		{
			name: "file value used",
			file: `functions = "/srv/functions"`,
			check: func(t *testing.T, fs *pflag.FlagSet, _ *globals) {
				wantFlag(t, fs, "functions", "/srv/functions")
				if !fs.Changed("functions") {
					t.Error("a value from the file should count as given, as its flag would")
				}
				wantFlag(t, fs, "data", "./data")
			},
		},
		{
			name: "flag overrides file",
			file: "functions = \"/srv/functions\"\ndata = \"/var/lib/host\"",
			args: []string{"--functions", "/tmp/fn"},
			check: func(t *testing.T, fs *pflag.FlagSet, _ *globals) {
				wantFlag(t, fs, "functions", "/tmp/fn")
				wantFlag(t, fs, "data", "/var/lib/host")
			},
		},
		{
			name: "duration",
			file: `default-timeout = "2m30s"`,
			check: func(t *testing.T, fs *pflag.FlagSet, _ *globals) {
				if d, _ := fs.GetDuration("default-timeout"); d != 150*time.Second {
					t.Errorf("default-timeout = %v, want 2m30s", d)
				}
			},
		},
		{
			name: "int64",
			file: `max-output-bytes = 1048576`,
			check: func(t *testing.T, fs *pflag.FlagSet, _ *globals) {
				if n, _ := fs.GetInt64("max-output-bytes"); n != 1<<20 {
					t.Errorf("max-output-bytes = %d, want 1048576", n)
				}
			},
		},
		{
			name: "bool",
			file: `nats-auth = true`,
			check: func(t *testing.T, fs *pflag.FlagSet, _ *globals) {
				if b, _ := fs.GetBool("nats-auth"); !b {
					t.Error("nats-auth = false, want true")
				}
			},
		},
		{
			name: "string array: one Set per element",
			file: `hook = ["github=hmac:gh-key", "ci=bearer:ci-key", "ping=open"]`,
			check: func(t *testing.T, fs *pflag.FlagSet, _ *globals) {
				got, _ := fs.GetStringArray("hook")
				if want := []string{"github=hmac:gh-key", "ci=bearer:ci-key", "ping=open"}; !slices.Equal(got, want) {
					t.Errorf("hook = %q, want %q", got, want)
				}
			},
		},
		{
			name: "string array on the command line replaces the file's whole array",
			file: `hook = ["github=hmac:gh-key", "ping=open"]`,
			args: []string{"--hook", "ci=open"},
			check: func(t *testing.T, fs *pflag.FlagSet, _ *globals) {
				if got, _ := fs.GetStringArray("hook"); !slices.Equal(got, []string{"ci=open"}) {
					t.Errorf("hook = %q, want [ci=open]", got)
				}
			},
		},
		{
			name: "string slice",
			file: `allow-network-host = ["a", "b,c"]`,
			check: func(t *testing.T, fs *pflag.FlagSet, _ *globals) {
				if got, _ := fs.GetStringSlice("allow-network-host"); !slices.Equal(got, []string{"a", "b", "c"}) {
					t.Errorf("allow-network-host = %q, want [a b c]", got)
				}
			},
		},
		{
			name: "a single value for a repeatable flag",
			file: `pip-find-links = "/wheels"`,
			check: func(t *testing.T, fs *pflag.FlagSet, _ *globals) {
				if got, _ := fs.GetStringArray("pip-find-links"); !slices.Equal(got, []string{"/wheels"}) {
					t.Errorf("pip-find-links = %q, want [/wheels]", got)
				}
			},
		},
		{
			name: "persistent flags have keys",
			file: "log-level = \"debug\"\nnats = \"nats://n1:4222\"",
			check: func(t *testing.T, _ *pflag.FlagSet, g *globals) {
				if g.logLevel != "debug" || g.natsURL != "nats://n1:4222" {
					t.Errorf("log-level, nats = %q, %q; want debug, nats://n1:4222", g.logLevel, g.natsURL)
				}
			},
		},
		{
			name: "persistent flag on the command line overrides the file",
			file: `log-level = "debug"`,
			args: []string{"--log-level", "warn"},
			check: func(t *testing.T, _ *pflag.FlagSet, g *globals) {
				if g.logLevel != "warn" {
					t.Errorf("log-level = %q, want warn", g.logLevel)
				}
			},
		},
		{
			name:    "unknown key",
			file:    `max-output-byte = 1`,
			wantErr: []string{"host.toml", `unknown key "max-output-byte"`, `did you mean "max-output-bytes"`},
		},
		{
			name:    "underscores for dashes",
			file:    `default_timeout = "1m"`,
			wantErr: []string{"host.toml", `unknown key "default_timeout"`, `did you mean "default-timeout"`},
		},
		{
			name:    "config is not a key",
			file:    `config = "other.toml"`,
			wantErr: []string{"host.toml", `unknown key "config"`},
		},
		{
			name:    "bad value",
			file:    `default-timeout = "soon"`,
			wantErr: []string{"host.toml", `key "default-timeout"`, `invalid argument "soon" for "--default-timeout" flag`, "invalid duration"},
		},
		{
			name:    "a number where a duration needs its unit",
			file:    `drain-timeout = 30`,
			wantErr: []string{"host.toml", `key "drain-timeout"`, "missing unit"},
		},
		{
			name:    "bad int",
			file:    `max-hops = "many"`,
			wantErr: []string{"host.toml", `key "max-hops"`, `invalid argument "many" for "--max-hops" flag`},
		},
		{
			name:    "array for a single-valued flag",
			file:    `functions = ["/a", "/b"]`,
			wantErr: []string{"host.toml", `key "functions"`, "an array, but this flag takes a single value"},
		},
		{
			name:    "table",
			file:    "[serve]\nfunctions = \"/a\"",
			wantErr: []string{"host.toml", `unknown key "serve"`},
		},
		{
			name:    "inline table as a value",
			file:    `workspace = { name = "x" }`,
			wantErr: []string{"host.toml", `key "workspace"`, "a table, but flags take a string, number or boolean"},
		},
		{
			name:    "table inside an array",
			file:    `hook = [{ source = "x" }]`,
			wantErr: []string{"host.toml", `key "hook"`, "element 0", "a table"},
		},
		{
			name:    "date-time",
			file:    `workspace = 2026-01-02T03:04:05Z`,
			wantErr: []string{"host.toml", `key "workspace"`, "write it as a string"},
		},
		{
			name:    "missing file",
			file:    "-",
			wantErr: []string{"--config", "host.toml", "no such file"},
		},
		{
			name:    "not TOML",
			file:    `functions = `,
			wantErr: []string{"host.toml", "not valid TOML"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "host.toml")
			if tc.file != "-" {
				if err := os.WriteFile(path, []byte(tc.file+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			root, serve, g := testServe(t)
			root.SetArgs(append([]string{"serve", "--config", path}, tc.args...))
			err := root.Execute()
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("no error, want one saying %q", tc.wantErr)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, serve.Flags(), g)
		})
	}
}

func TestConfigWithoutFileChangesNothing(t *testing.T) {
	root, serve, _ := testServe(t)
	root.SetArgs([]string{"serve"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	serve.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			t.Errorf("--%s changed without a --config or the flag", f.Name)
		}
	})
}

func wantFlag(t *testing.T, fs *pflag.FlagSet, name, want string) {
	t.Helper()
	if got := fs.Lookup(name).Value.String(); got != want {
		t.Errorf("--%s = %q, want %q", name, got, want)
	}
}

// examplePath is the configuration file the packages install as /etc/host/host.toml.
const examplePath = "../../packaging/host.toml"

// exampleSettings are the keys packaging/host.toml sets for the systemd layout (README,
// Packaging); every other key is commented out, showing its default.
var exampleSettings = map[string]string{
	"functions":        `"/srv/functions"`,
	"data":             `"/var/lib/host"`,
	"secrets-key-file": `"/var/lib/host-secrets/secrets.key"`,
	"http-token-file":  `"/var/lib/host-secrets/http.token"`,
}

const exampleHeader = `# host serve --config /etc/host/host.toml
#
# Each key is a flag of ` + "`host serve`" + ` (see ` + "`host serve --help`" + `), and its value is what would follow
# the flag on the command line: strings, numbers and booleans as such, durations as strings
# ("15m"), and for a repeatable flag an array, which gives the flag once per element. A flag on
# the command line overrides its key. Commented-out keys show the default.
#
# Generated from serve's flags by TestConfigExample (cmd/host/config_test.go); after changing a
# flag, regenerate it with
#   UPDATE_CONFIG_EXAMPLE=1 go test -run TestConfigExample ./cmd/host/

# NATS connection (flags every command shares; in the environment: $NATS_URL, $NATS_CREDS,
# $NATS_USER, $NATS_PASSWORD, which this file overrides).
#
# NATS server URL; empty starts the embedded server
# nats = ""
# NATS credentials file
# creds = ""
# NATS user and password
# user = ""
# password = ""
# NATS CLI context to use
# context = ""
# log level: debug, info, warn, error
# log-level = "info"
# log format: console (for people), json (for machines), or auto: console on a terminal, json otherwise
# log-format = "auto"

# Serving.
`

// renderConfigExample writes packaging/host.toml from serve's own flags, so it names every
// flag with its real default and usage.
func renderConfigExample(flags *pflag.FlagSet) string {
	var b strings.Builder
	b.WriteString(exampleHeader)
	flags.VisitAll(func(f *pflag.Flag) {
		if f.Name == configFlag || f.Name == "help" {
			return
		}
		b.WriteString("\n")
		for _, line := range wrap(f.Usage, 96) {
			b.WriteString("# " + line + "\n")
		}
		if v, ok := exampleSettings[f.Name]; ok {
			fmt.Fprintf(&b, "%s = %s\n", f.Name, v)
			return
		}
		fmt.Fprintf(&b, "# %s = %s\n", f.Name, tomlDefault(f))
	})
	return b.String()
}

func tomlDefault(f *pflag.Flag) string {
	switch f.Value.Type() {
	case "bool", "int", "int64", "uint", "uint64":
		return f.DefValue
	case "stringArray", "stringSlice":
		return "[]"
	}
	return strconv.Quote(f.DefValue)
}

func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return append(lines, line)
}

// TestConfigExample keeps packaging/host.toml what serve's flags say, and checks that the
// file, with every key uncommented, is accepted by the real binary.
func TestConfigExample(t *testing.T) {
	_, serve, _ := testServe(t)
	want := renderConfigExample(serve.LocalNonPersistentFlags())
	if os.Getenv("UPDATE_CONFIG_EXAMPLE") != "" {
		if err := os.WriteFile(examplePath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("%s is stale: regenerate it with UPDATE_CONFIG_EXAMPLE=1 go test -run TestConfigExample ./cmd/host/ (want:\n%s)", examplePath, want)
	}

	// Every flag `host serve --help` lists (the root's persistent ones included) has its key,
	// and every key is a flag.
	flagNames := serveHelpFlags(t)
	delete(flagNames, configFlag)
	keyRE := regexp.MustCompile(`(?m)^(?:# )?([a-z0-9-]+) = `)
	keys := map[string]bool{}
	var uncommented strings.Builder
	for _, line := range strings.Split(string(got), "\n") {
		m := keyRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		keys[m[1]] = true
		uncommented.WriteString(strings.TrimPrefix(line, "# ") + "\n")
	}
	for name := range flagNames {
		if !keys[name] {
			t.Errorf("%s has no key for --%s", examplePath, name)
		}
	}
	for key := range keys {
		if _, ok := flagNames[key]; !ok {
			t.Errorf("%s has key %q, which is no flag of serve", examplePath, key)
		}
	}

	// The binary applies the whole file in PreRunE, then fails on purpose at the first thing
	// serve does, --log-level (given on the command line, so it overrides the file's): an
	// error there, not one naming the file, means every key and value was accepted.
	path := filepath.Join(t.TempDir(), "host.toml")
	if err := os.WriteFile(path, []byte(uncommented.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := run(t, "serve", "--config", path, "--log-level", "nope")
	if code == 0 || !strings.Contains(stderr, `--log-level "nope"`) || strings.Contains(stderr, path) {
		t.Fatalf("serve --config (the example, uncommented) --log-level nope: exit %d, stderr %q; want the log level refused, not the file", code, stderr)
	}
}

// serveHelpFlags are the flags `host serve --help` lists, the root's persistent ones included
// (not help), with their defaults as the help prints them ("30s", "\"./data\"", or "").
func serveHelpFlags(t *testing.T) map[string]string {
	t.Helper()
	help, stderr, code := run(t, "serve", "--help")
	if code != 0 {
		t.Fatalf("serve --help: exit %d: %s", code, stderr)
	}
	flags := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+).*?(?:\(default ([^()]*)\))?$`).FindAllStringSubmatch(help, -1) {
		if m[1] != "help" {
			flags[m[1]] = m[2]
		}
	}
	if len(flags) < 40 {
		t.Fatalf("found only %d flags in serve --help:\n%s", len(flags), help)
	}
	return flags
}

func TestNearestFlag(t *testing.T) {
	flags := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	flags.String(configFlag, "", "")
	for _, name := range []string{"nats", "nats-url", "workers", "default-timeout", "hook"} {
		flags.String(name, "", "")
	}
	cases := []struct{ key, want string }{
		{"nats_url", "nats-url"},              // underscores for dashes
		{"natsurl", "nats-url"},               // one insertion
		{"wokrers", "workers"},                // a swap costs one edit
		{"default_timeot", "default-timeout"}, // no cut-off: the nearest, however far
		{"hooks", "hook"},
		{"confi", "hook"}, // never the config flag itself; a tie goes to the first name in order
	}
	for _, c := range cases {
		if got := nearestFlag(flags, c.key); got != c.want {
			t.Errorf("nearestFlag(%q) = %q, want %q", c.key, got, c.want)
		}
	}
}
