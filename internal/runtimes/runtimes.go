// Package runtimes knows how to run a user's script as a job and how to read
// what the run produced, for every supported language.
//
// The contract with users, as in Windmill:
//
//   - The runtime follows the entry file's extension: .py runs on python3;
//     .ts .tsx .js .mjs .cjs on Bun; .sh on bash; any other file that starts
//     with "#!" and has an execute bit runs as itself.
//   - Python and TS/JS scripts define main. A JSON object payload maps onto
//     main's parameters by name; missing optional parameters take their
//     defaults; a missing required one is an argument error; keys matching no
//     parameter are ignored (unless main takes **kwargs). main's return value,
//     as JSON, is the result.
//   - Bash and executables get the payload as JSON on stdin and each top-level
//     scalar as ARG_<KEY> in the environment (up to MaxArgEnv bytes each); the
//     result is the last stdout line, parsed as JSON when it is JSON.
//   - Arguments and results travel through files or pipes, never the command
//     line, which is visible to every process on the machine and size-limited.
//
// Python and Bun scripts are started through small shims (shim.py, shim.mjs,
// embedded here and written out by WriteShims) that import the script, bind
// the payload from IODir/args.json, call main and write IODir/result.json or
// IODir/error.json. The runner owns the sandbox and the paths: Build says what
// to execute, Outcome turns the leftovers of a finished run into a result or a
// typed error.
package runtimes

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Kind is the runtime a script runs on.
type Kind string

const (
	Python Kind = "python" // python3 with the Python shim
	Bun    Kind = "bun"    // bun with the JS shim; runs TS and JS
	Bash   Kind = "bash"   // bash <script>
	Exec   Kind = "exec"   // the script itself, through its shebang
)

// File names inside Paths.IODir.
const (
	ArgsFile   = "args.json"   // written by the host before the run (Python, Bun)
	ResultFile = "result.json" // written by the shim when main returned
	ErrorFile  = "error.json"  // written by the shim when the run failed
)

// Exit codes used by the shims. Outcome goes by the files the shims write and
// only falls back to the code when there are none.
const (
	ExitException = 1 // main raised, or importing the script failed
	ExitTerminal  = 2 // argument, definition or result error
	// ExitImportAhead: a warm runtime's import ahead of its job failed (see BuildWarm).
	ExitImportAhead = 3
)

// extensions maps a lower-cased file extension to its runtime.
var extensions = map[string]Kind{
	".py":  Python,
	".ts":  Bun,
	".tsx": Bun,
	".js":  Bun,
	".mjs": Bun,
	".cjs": Bun,
	".sh":  Bash,
}

const supported = `.py (python3), .ts .tsx .js .mjs .cjs (bun), .sh (bash), ` +
	`or an executable file starting with "#!"`

// Detect picks the runtime for an entry file by its extension; any other file
// runs as itself when it starts with "#!" and has an execute bit. The file must
// exist: a directory or a missing file is an error naming it.
func Detect(path string) (Kind, error) {
	info, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("runtimes: cannot run %s: %w", path, err)
	}
	if !info.Mode().IsRegular() {
		return "", fmt.Errorf("runtimes: cannot run %s: not a regular file", path)
	}
	ext := strings.ToLower(filepath.Ext(path))
	if kind, ok := extensions[ext]; ok {
		return kind, nil
	}

	shebang, err := hasShebang(path)
	if err != nil {
		return "", fmt.Errorf("runtimes: cannot run %s: %w", path, err)
	}
	what := "no extension"
	if ext != "" {
		what = fmt.Sprintf("extension %q", ext)
	}
	switch {
	case shebang && info.Mode().Perm()&0o111 != 0:
		return Exec, nil
	case shebang:
		return "", fmt.Errorf("runtimes: cannot run %s: it starts with \"#!\" but is not executable (chmod +x it); supported: %s", path, supported)
	default:
		return "", fmt.Errorf("runtimes: cannot run %s: unsupported file (%s, no \"#!\" line); supported: %s", path, what, supported)
	}
}

func hasShebang(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	head := make([]byte, 2)
	if _, err := io.ReadFull(f, head); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return false, nil // too short to have one
		}
		return false, err
	}
	return string(head) == "#!", nil
}

// Paths are as the job's process sees them: inside the jail, or host paths
// when unjailed.
type Paths struct {
	Script  string // the entry file
	ShimDir string // where WriteShims put the shims (Python and Bun only)
	IODir   string // per-job dir: args.json in, result.json or error.json out
}

// Command is how to start one run.
type Command struct {
	Argv []string
	// Env holds extra KEY=VALUE entries for this runtime (ARG_* for bash and
	// exec, interpreter settings for Python and Bun); the runner adds PATH,
	// HOME and the rest.
	Env []string
	// Stdin is what to feed on stdin: the payload for Bash and Exec, nil for
	// Python and Bun (give them an empty stdin, e.g. /dev/null).
	Stdin []byte
	// Omitted lists the ARG_* variables of Bash and Exec that were not set
	// because their values are too long for the environment (see MaxArgEnv);
	// the job's log should say so, as the script will find them unset.
	Omitted []OmittedArg
}

// MaxArgEnv bounds the value of one ARG_<KEY> variable, and MaxArgEnvTotal all
// of them together. The kernel refuses to start a program whose environment
// holds a string over 128 KiB, or whose arguments and environment together
// pass its limit (a quarter of the stack limit, often 2 MiB), with E2BIG
// ("Argument list too long"): a bash function given a 200 KB argument would
// see every external command it runs fail. A value past either bound is left
// to the JSON on stdin, where it always is.
const (
	MaxArgEnv      = 32 << 10
	MaxArgEnvTotal = 256 << 10
)

// OmittedArg is an ARG_* variable that was not set, and why.
type OmittedArg struct {
	Name  string // ARG_<KEY>
	Key   string // the payload's key
	Bytes int    // the length of its value
	// Total is true when the value fits MaxArgEnv but the variables before it
	// (in key order) already took MaxArgEnvTotal.
	Total bool
}

// Reason says, for the job's log, which variable was left out and why.
func (o OmittedArg) Reason() string {
	why := fmt.Sprintf("its value is %d bytes, over the %d-byte bound for one ARG_ variable", o.Bytes, MaxArgEnv)
	if o.Total {
		why = fmt.Sprintf("with its %d bytes the ARG_ variables would pass their %d-byte bound together", o.Bytes, MaxArgEnvTotal)
	}
	return fmt.Sprintf("%s is not set: %s (a larger environment makes every command the script runs fail with \"Argument list too long\"); "+
		"read %q from the JSON on stdin instead", o.Name, why, o.Key)
}

// Build returns how to run the script. payload is the raw JSON object
// (already validated as an object by the caller, "{}" when empty); args is
// the same decoded. For Python and Bun the caller must write payload to
// IODir/ArgsFile before starting the command.
func Build(kind Kind, p Paths, payload []byte, args map[string]any) (*Command, error) {
	if p.Script == "" {
		return nil, errors.New("runtimes: Build: Paths.Script is empty")
	}
	switch kind {
	case Python, Bun:
		if p.ShimDir == "" || p.IODir == "" {
			return nil, fmt.Errorf("runtimes: Build: %s needs Paths.ShimDir and Paths.IODir", kind)
		}
	case Bash:
		if p.ShimDir == "" {
			return nil, fmt.Errorf("runtimes: Build: bash needs Paths.ShimDir (bash.sh)")
		}
	}

	switch kind {
	case Python:
		return &Command{
			// -s: no user site-packages, -B: no .pyc writes into a read-only
			// mount. "python3" resolves on the job's PATH.
			Argv: []string{"python3", "-s", "-B", filepath.Join(p.ShimDir, pythonShim), p.Script, p.IODir},
			Env: []string{
				// UTF-8 stdio and open() even when the jail has no locale.
				"PYTHONUTF8=1",
				"PYTHONIOENCODING=utf-8",
			},
		}, nil
	case Bun:
		return &Command{
			// --no-install: Bun would otherwise fetch missing packages from
			// npm at import time whenever there is no node_modules.
			// --no-env-file: a .env in the working dir is not the job's config.
			Argv: []string{"bun", "--no-install", "--no-env-file", filepath.Join(p.ShimDir, bunShim), p.Script, p.IODir},
			Env: []string{
				// The transpiler cache lives under $HOME or /tmp; in a jail
				// those may be read-only or shared between jobs.
				"BUN_RUNTIME_TRANSPILER_CACHE_PATH=0",
				"NO_COLOR=1",
				"DO_NOT_TRACK=1",
			},
		}, nil
	case Bash, Exec:
		env, omitted, err := argEnv(payload, args)
		if err != nil {
			return nil, err
		}
		// Through bash.sh, which runs the script in its own shell and prints the end line.
		argv := []string{"bash", filepath.Join(p.ShimDir, bashRun), p.Script}
		if kind == Exec {
			argv = []string{p.Script}
		}
		stdin := payload
		if len(bytes.TrimSpace(stdin)) == 0 {
			stdin = []byte("{}")
		}
		return &Command{Argv: argv, Env: env, Stdin: stdin, Omitted: omitted}, nil
	default:
		return nil, fmt.Errorf("runtimes: Build: unknown runtime %q", kind)
	}
}

// argEnv turns the payload's top-level scalars into ARG_<KEY> entries, up to
// MaxArgEnv each and MaxArgEnvTotal together, and lists those it left out.
// Values come from the raw payload when there is one, so numbers keep their
// exact JSON text (a float64 would turn 12345678901234567890 into
// 12345678901234567000).
func argEnv(payload []byte, args map[string]any) ([]string, []OmittedArg, error) {
	values := map[string]string{}
	if len(bytes.TrimSpace(payload)) > 0 {
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(payload, &raw); err != nil {
			return nil, nil, fmt.Errorf("runtimes: Build: payload is not a JSON object: %w", err)
		}
		for k, v := range raw {
			if s, ok := scalarText(v); ok {
				values[k] = s
			}
		}
	} else {
		for k, v := range args {
			b, err := json.Marshal(v)
			if err != nil {
				continue
			}
			if s, ok := scalarText(b); ok {
				values[k] = s
			}
		}
	}

	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	// Sorted so that when two keys normalise to the same name ("a-b" and
	// "a_b"), the same one wins every time.
	sort.Strings(keys)
	seen := map[string]bool{}
	var env []string
	var omitted []OmittedArg
	total := 0
	for _, k := range keys {
		name, ok := argName(k)
		if !ok || seen[name] {
			continue
		}
		v := values[k]
		if strings.IndexByte(v, 0) >= 0 {
			continue // a NUL cannot be in the environment; exec would fail
		}
		seen[name] = true
		size := len(name) + 1 + len(v)
		switch {
		case len(v) > MaxArgEnv:
			omitted = append(omitted, OmittedArg{Name: name, Key: k, Bytes: len(v)})
			continue
		case total+size > MaxArgEnvTotal:
			omitted = append(omitted, OmittedArg{Name: name, Key: k, Bytes: len(v), Total: true})
			continue
		}
		total += size
		env = append(env, name+"="+v)
	}
	return env, omitted, nil
}

// scalarText renders a JSON string, number or boolean for the environment:
// strings unquoted, numbers and booleans as written. Null, objects and
// arrays are not scalars and report false.
func scalarText(v json.RawMessage) (string, bool) {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return "", false
	}
	switch v[0] {
	case '"':
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return "", false
		}
		return s, true
	case 't', 'f':
		return string(v), true
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return string(v), true
	}
	return "", false
}

// argName maps a payload key to ARG_<KEY>: upper-cased, and every character
// outside [A-Z0-9_] replaced by "_", so "user-name" becomes ARG_USER_NAME.
func argName(key string) (string, bool) {
	if key == "" {
		return "", false
	}
	var b strings.Builder
	b.WriteString("ARG_")
	for _, r := range strings.ToUpper(key) {
		if r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String(), true
}
